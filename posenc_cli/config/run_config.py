"""The run's configuration as typed objects, made once from the composed and validated config.

Composing, overriding, sweeping and saving work on Hydra's DictConfig (config/compose.py,
config/rundir.py); every stage after that reads a RunConfig: ``cfg.train.steps`` is an int,
``cfg.encoding.params`` the constructor's arguments, with every ``${...}`` resolved. The
sections are the schema's dataclasses (config/schema.py), so a key's type and range are
declared once; the encoding and the task, whose keys depend on the option chosen, are typed
here by what every option has, their own keys kept as the mapping their class reads.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigKeyError, OmegaConfBaseException, ValidationError

from posenc_cli.common.errors import PosencError
from posenc_cli.config.errors import unknown_key
from posenc_cli.config.schema import (
    BenchConfig,
    EvalConfig,
    ExtendConfig,
    ExtrapolationConfig,
    ModelConfig,
    TrainConfig,
)
from posenc_cli.data.config import DataConfig
from posenc_cli.encodings.names import META_KEYS
from posenc_cli.synthetic.config import TaskConfig, task_config

T = TypeVar("T")


@dataclass
class EncodingConfig:
    """encoding.*: the option's name, the class its ``_target_`` names, and the parameters its
    constructor takes (encodings/parameters.py checks them against its signature)."""

    name: str
    target: str
    params: dict[str, Any]
    description: str = ""
    paper: str = ""

    def as_yaml(self) -> dict[str, Any]:
        """The section as configs/encoding/<name>.yaml lays it out (checkpoints keep it)."""
        meta = {"name": self.name, "description": self.description, "paper": self.paper}
        return {**meta, "_target_": self.target, **self.params}


@dataclass
class EvalSettings:
    """eval.*: which tasks run and when, the extrapolation task's typed section, and each other
    task's own section as given (the task merges it over its defaults, evals/base.py). The
    schema's older flat names (eval.factors, …) are folded into the section when composed."""

    tasks: list[str]
    at_end: bool
    extrapolation: ExtrapolationConfig
    sections: dict[str, dict[str, Any]] = field(default_factory=dict)


@dataclass
class RunConfig:
    """One run's whole configuration, typed."""

    encoding: EncodingConfig
    model: ModelConfig
    data: DataConfig
    train: TrainConfig
    eval: EvalSettings
    extend: ExtendConfig
    task: TaskConfig
    seed: int
    device: str
    resume: str | None = None
    bench: BenchConfig | None = None

    def as_yaml(self) -> dict[str, Any]:
        """Plain values laid out as the composed config (checkpoints keep it)."""
        out = dataclasses.asdict(self)
        out["encoding"] = self.encoding.as_yaml()
        out["task"] = self.task.as_yaml()
        out["eval"].update(out["eval"].pop("sections"))
        if self.bench is None:
            del out["bench"]
        return out

    def base_length(self) -> int:
        """The length evaluation factors multiply: the parent's training length for a run
        made by `posenc extend`, the run's own otherwise."""
        if self.extend.parent is not None and self.extend.original_length is not None:
            return self.extend.original_length
        return self.train.context_length

    def label(self) -> str:
        """'rope seed 0', or 'rope copy seed 0' for a task run: what progress lines and sweep
        messages call a run, so two jobs of one encoding on two tasks are told apart."""
        task = f" {self.task.name}" if self.task.synthetic else ""
        return f"{self.encoding.name}{task} seed {self.seed}"


def typed(cfg: DictConfig) -> RunConfig:
    """The validated composed config (config.compose.validate) as a RunConfig."""
    own = OmegaConf.masked_copy(cfg, [str(k) for k in cfg if k != "hydra"])  # Hydra's: its own
    values = OmegaConf.to_container(own, resolve=True)
    assert isinstance(values, dict)
    enc = values["encoding"]
    ev = values["eval"]
    return RunConfig(
        encoding=EncodingConfig(
            name=str(enc["name"]),
            target=str(enc["_target_"]),
            params={k: v for k, v in enc.items() if k not in META_KEYS},
            description=str(enc.get("description", "")),
            paper=str(enc.get("paper", "")),
        ),
        model=_section(ModelConfig, values["model"], "model"),
        data=_section(DataConfig, values["data"], "data"),
        train=_section(TrainConfig, values["train"], "train"),
        eval=_eval_settings(ev),
        extend=_section(ExtendConfig, values["extend"], "extend"),
        task=task_config(dict(values.get("task") or {})),
        seed=int(values["seed"]),
        device=str(values["device"]),
        resume=values.get("resume"),
        bench=_section(BenchConfig, values["bench"], "bench") if "bench" in values else None,
    )


def _eval_settings(ev: dict[str, Any]) -> EvalSettings:
    own = {f.name for f in dataclasses.fields(EvalConfig)}
    typed_keys = _section(EvalConfig, {k: v for k, v in ev.items() if k in own}, "eval")
    return EvalSettings(
        tasks=list(typed_keys.tasks),
        at_end=typed_keys.at_end,
        extrapolation=typed_keys.extrapolation,
        sections={k: v for k, v in ev.items() if k not in own},
    )


def _section(cls: type[T], values: dict[str, Any], name: str) -> T:
    """A schema section's dataclass from its resolved values (nested sections included). A
    config composed here was validated already; one read from a run directory someone else
    wrote may hold an unknown key or a wrong type, which is then one line naming it."""
    try:
        return cast(T, OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(cls), values)))
    except OmegaConfBaseException as exc:
        key = f"{name}.{getattr(exc, 'full_key', '') or getattr(exc, 'key', '') or '?'}"
        if isinstance(exc, ConfigKeyError):
            raise unknown_key(key) from None
        raise PosencError(
            f"wrong type for '{key}': {str(exc).splitlines()[0]}",
            "give a value of the type in configs/ (a received run: restore its .hydra/config.yaml)",
        ) from None


def checked_section(cls: type[T], values: Any, prefix: str) -> T:
    """``values`` as the dataclass ``cls``, every field's type and Rule checked: one line
    naming ``prefix``.<key> for the first value refused."""
    try:
        node = cast(DictConfig, OmegaConf.merge(OmegaConf.structured(cls), values))
    except ValidationError as exc:
        raise PosencError(
            f"wrong type for '{prefix}.{exc.full_key or exc.key}': {str(exc.msg).splitlines()[0]}",
            f"give a value of the type in configs/ ({prefix}.*)",
        ) from None
    for f in dataclasses.fields(cast(Any, cls)):  # a dataclass: the caller declares it
        rule = f.metadata.get("rule")
        name, value = f"{prefix}.{f.name}", node[f.name]
        if rule is not None and (problem := rule.problem(name, value)) is not None:
            raise PosencError(problem, rule.advice(name, value))
    return cast(T, OmegaConf.to_object(node))
