"""What `posenc inspect` looks at (``Subject``) and the protocol of its figures.

A figure is one file in inspection/figures/ defining one subclass of ``InspectFigure``; it
says when it does not apply (``skip_reason``) and draws its PNGs. Adding one touches no list.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import Tensor

from posenc_cli.common.plugins import import_all, subclasses
from posenc_cli.config.run_config import RunConfig
from posenc_cli.inspection.attention_stats import AttentionStats, collect
from posenc_cli.inspection.properties import Property
from posenc_cli.model.transformer import TransformerLM

#: Windows of random tokens an untrained config is probed with (content biases need text).
CONFIG_WINDOWS = 2


@dataclass
class Subject:
    """A model to inspect: ``model`` is the trained one for a run, the freshly initialised one
    for a config; ``initial`` (runs only) is the run's initialisation, rebuilt from its seed.
    ``text`` holds (B, longest) windows of held-out ids (runs), else None."""

    cfg: RunConfig
    model: TransformerLM
    initial: TransformerLM | None
    train_length: int
    longest: int
    text: Tensor | None
    step: int = 0
    _stats: dict[tuple[str, int], AttentionStats] = field(default_factory=dict)

    @property
    def trained(self) -> bool:
        return self.initial is not None

    @property
    def encoding(self) -> Any:
        return self.model.encoding

    def windows(self, length: int) -> Tensor:
        """The probe's input at ``length``: the held-out windows cut into pieces of that
        length (the same tokens at every length), or seeded random ids for a config."""
        if self.text is None:
            gen = torch.Generator().manual_seed(self.cfg.seed)
            return torch.randint(0, self.model.vocab_size, (CONFIG_WINDOWS, length), generator=gen)
        T = self.text.shape[1]
        return self.text[:, : T // length * length].reshape(-1, length)

    def computed(self, which: str, length: int) -> bool:
        """Whether a figure has already asked for these statistics."""
        return (which, length) in self._stats

    def stats(self, which: str, length: int) -> AttentionStats:
        """Attention statistics of ``model`` or ``initial`` at ``length``, computed once."""
        key = (which, length)
        if key not in self._stats:
            model = self.model if which == "model" else self.initial
            assert model is not None, "a config has no initial model apart from its model"
            self._stats[key] = collect(model, self.windows(length), self.train_length)
        return self._stats[key]


@dataclass
class Output:
    """One PNG: its file stem, the matplotlib figure and a one-sentence caption."""

    stem: str
    figure: Any
    caption: str


@dataclass
class InspectReport:
    """What one inspection wrote and measured."""

    out_dir: Path
    subject: Subject
    #: (file name, caption, the derivation it draws)
    files: list[tuple[str, str, str]] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (figure, why)
    properties: list[Property] = field(default_factory=list)
    scalars: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0


class InspectFigure:
    """One kind of figure; stateless."""

    #: Order in the summary and file names' prefix.
    order: ClassVar[int] = 0
    name: ClassVar[str] = ""
    #: The derivation it shows (docs/encodings.md section).
    derivation: ClassVar[str] = ""

    def skip_reason(self, subject: Subject) -> str | None:
        """Why this figure does not apply to the subject, or None."""
        return None

    def draw(self, subject: Subject) -> list[Output]:
        raise NotImplementedError

    def scalars(self, subject: Subject) -> dict[str, float]:
        """Numbers worth a TensorBoard scalar (runs only)."""
        return {}


def figures() -> list[InspectFigure]:
    """Every figure in inspection/figures/, in their order."""
    # deferred: the figure modules import this one
    from posenc_cli.inspection import figures as package

    import_all(package)
    return sorted(
        (cls() for cls in subclasses(InspectFigure) if cls.name), key=lambda f: (f.order, f.name)
    )
