"""Passkey retrieval by distance (Mohtashami & Jaggi 2023): does the language model use a
fact stated once, far back in its context?

A five-digit key is stated once ("the pass key is 71432. remember it.") at a depth of held-out
text, and the text ends with the question "the pass key is". Scored teacher-forced on the key's
tokens, so without sampling noise: exact match (every key token the argmax: what greedy
decoding would write) and the key's probability, both against the same text with the sentence
removed — the model's chance of the key without the fact. ``lift`` is the mean log ratio of
the two probabilities: 0 when the sentence does not help. Keys and text offsets come from
eval.retrieval.seed and the length, so every run sees the same instances.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from omegaconf import ListConfig
from rich.table import Table

from posenc_cli.common.errors import PosencError
from posenc_cli.common.run_layout import RunDir
from posenc_cli.config.extension import base_length
from posenc_cli.evals.base import EvalTask, by_length

if TYPE_CHECKING:
    from torch import Tensor, nn
    from torch.utils.tensorboard import SummaryWriter

    from posenc_cli.data.cache import TokenData
    from posenc_cli.engine.runtime import Runtime

QUESTION = " the pass key is"
REMEMBER = ". remember it."


@dataclass(frozen=True)
class Instance:
    """One key at one length: the text with the sentence at each depth, and without it."""

    key: int
    answer: list[int]
    with_key: list[list[int]]
    without: list[int]


def key_tokens(encode: Any, key: int) -> tuple[list[int], list[int], list[int]]:
    """The sentence, the question and the answer (the key's tokens) as token ids."""
    question = encode(QUESTION)
    answer = encode(f" {key}")
    return [*question, *answer, *encode(REMEMBER)], question, answer


def instances(
    val: np.ndarray, encode: Any, length: int, depths: list[float], keys: int, seed: int
) -> list[Instance]:
    """``keys`` instances of ``length`` tokens (question and answer included) each."""
    rng = np.random.default_rng([seed, length])
    out = []
    for _ in range(keys):
        key = int(rng.integers(10_000, 100_000))
        sentence, question, answer = key_tokens(encode, key)
        room = length - len(sentence) - len(question) - len(answer)
        if room < 1:
            return []
        offsets = len(val) - room - len(sentence) + 1
        if offsets < 1:  # the held-out text is too short to fill the length
            return []
        start = int(rng.integers(0, offsets))
        text = [int(t) for t in val[start : start + room]]
        tail = [*question, *answer]
        with_key = [
            [*text[:at], *sentence, *text[at:], *tail] for at in (round(d * room) for d in depths)
        ]
        out.append(Instance(key, answer, with_key, [*text, *tail]))
    return out


def answer_scores(
    model: nn.Module, rows: list[list[int]], answer: int, rt: Runtime
) -> tuple[Tensor, Tensor]:
    """Per row: whether every one of the last ``answer`` tokens is the argmax, and their
    summed log probability (teacher-forced)."""
    # deferred: torch only when the task runs; compare finds it without
    import torch

    width = max(len(r) for r in rows)
    x = torch.zeros(len(rows), width - 1, dtype=torch.long)
    y = torch.zeros(len(rows), answer, dtype=torch.long)
    for i, r in enumerate(rows):  # left-aligned; each row's answer ends its own sequence
        x[i, : len(r) - 1] = torch.tensor(r[:-1])
        y[i] = torch.tensor(r[-answer:])
    with rt.autocast():
        logits = model(x.to(rt.device)).float()
    ends = torch.tensor([len(r) - 1 for r in rows])
    idx = ends[:, None] - answer + torch.arange(answer)[None, :]
    picked = logits.cpu()[torch.arange(len(rows))[:, None], idx]  # (rows, answer, V)
    logp = picked.log_softmax(-1).gather(-1, y[..., None])[..., 0].sum(-1)
    return (picked.argmax(-1) == y).all(-1), logp


class Retrieval(EvalTask):
    name = "retrieval"

    def check(self, cfg: Any) -> None:
        s = self.settings(cfg)
        _require(_whole(s.factors, 1), "eval.retrieval.factors", s.factors, "[1,2,4,8,16]")
        _require(_whole([s.passkeys], 1), "eval.retrieval.passkeys", s.passkeys, "4")
        _require(_whole([s.seed], 0), "eval.retrieval.seed", s.seed, "0")
        depths = list(s.depths) if isinstance(s.depths, ListConfig) else []
        ok = bool(depths) and all(
            isinstance(d, (int, float)) and not isinstance(d, bool) and 0 <= d <= 1 for d in depths
        )
        _require(ok, "eval.retrieval.depths", s.depths, "[0,0.5,1] (fractions from 0 to 1)")

    def run(
        self, model: nn.Module, data: TokenData | None, cfg: Any, rt: Runtime
    ) -> dict[str, Any]:
        # deferred: torch only when the task runs; compare finds it without
        import torch

        assert data is not None  # a language-model task: not_applicable keeps task runs out
        s = self.settings(cfg)
        tok = data.tokenizer
        train_length = base_length(cfg)  # a `posenc extend` run: its parent's lengths
        depths = [float(d) for d in s.depths]
        limit = getattr(getattr(model, "encoding", None), "max_len", None)
        out = _empty_result(train_length, depths, s)
        for length in sorted({int(f) * train_length for f in s.factors}):
            out["lengths"].append(length)
            if limit is not None and length > limit:
                out["skipped"][str(length)] = f"needs {length} positions; the encoding has {limit}"
                continue
            cases = instances(
                data.val, lambda t: tok.encode(t).ids, length, depths, int(s.passkeys), int(s.seed)
            )
            if not cases:
                out["skipped"][str(length)] = (
                    "too short for the sentence and the question, or longer than the held-out text"
                )
                continue
            with torch.no_grad():
                scores = [self._score(model, c, rt) for c in cases]
            _record(out, str(length), scores, depths)
        return out

    @staticmethod
    def _score(
        model: nn.Module, case: Instance, rt: Runtime
    ) -> tuple[list[bool], list[float], bool, float]:
        hit, logp = answer_scores(model, [*case.with_key, case.without], len(case.answer), rt)
        return (
            [bool(h) for h in hit[:-1]],
            [float(p) for p in logp[:-1]],
            bool(hit[-1]),
            float(logp[-1]),
        )

    def log(self, writer: SummaryWriter, key: str, result: dict[str, Any], cfg: Any) -> None:
        """Exact match and lift with global_step = length; the length x depth heatmap."""
        for length in result["lengths"]:
            k = str(length)
            if result["exact_match"].get(k) is not None:
                writer.add_scalar(f"{key}/exact_match", result["exact_match"][k], length)
                writer.add_scalar(f"{key}/lift", result["lift"][k], length)
        image = heatmap(result, f"{cfg.encoding.name} (seed {cfg.seed})")
        if image is not None:
            writer.add_image(f"{key}/exact_match_by_depth", image, dataformats="HWC")

    def summary(self, result: dict[str, Any]) -> list[tuple[str, str]]:
        em = result.get("exact_match") or {}
        return [("passkey exact match", by_length(em, 2))] if em else []

    def render(self, run_dir: Path, cfg: Any, key: str, result: dict[str, Any]) -> list[Any]:
        table = Table(
            title=f"{key}: {cfg.encoding.name} (seed {cfg.seed}), {result['keys']} "
            f"keys x {len(result['depths'])} depths per length"
        )
        for col in ("length", "exact match", "(no key)", "p(key)", "(no key) ", "lift (nats)"):
            table.add_column(col, justify="right")
        for length in result["lengths"]:
            k = str(length)
            if k in result["skipped"]:
                table.add_row(k, "n/a", "", "", "", result["skipped"][k])
                continue
            table.add_row(
                k,
                *(f"{result[m][k]:.3f}" for m in ("exact_match", "exact_match_without")),
                *(f"{result[m][k]:.2e}" for m in ("p_key", "p_key_without")),
                f"{result['lift'][k]:+.3f}",
            )
        return [
            table,
            f'written to {RunDir(run_dir).metrics_file} under "{key}" and TensorBoard '
            f"({run_dir / 'eval' / key})",
        ]


def _whole(values: Any, low: int) -> bool:
    """A non-empty list of whole numbers >= ``low``."""
    return (
        isinstance(values, (list, ListConfig))
        and len(values) > 0
        and all(isinstance(v, int) and not isinstance(v, bool) and v >= low for v in values)
    )


def _require(ok: bool, key: str, value: Any, example: str) -> None:
    if not ok:
        raise PosencError(f"{key}={value} is not a valid setting", f"e.g. {key}={example}")


def _empty_result(train_length: int, depths: list[float], s: Any) -> dict[str, Any]:
    """The result before any length is scored: the settings, and every table empty."""
    return {
        "train_length": train_length,
        "depths": depths,
        "keys": int(s.passkeys),
        "seed": int(s.seed),
        "lengths": [],
        "exact_match": {},
        "exact_match_without": {},
        "p_key": {},
        "p_key_without": {},
        "lift": {},
        "by_depth": {},
        "skipped": {},
    }


def _record(
    out: dict[str, Any],
    k: str,
    scores: list[tuple[list[bool], list[float], bool, float]],
    depths: list[float],
) -> None:
    hits = np.array([s[0] for s in scores], dtype=float)  # (keys, depths)
    logp = np.array([s[1] for s in scores])
    base_hit = np.array([s[2] for s in scores], dtype=float)
    base_logp = np.array([s[3] for s in scores])
    out["exact_match"][k] = float(hits.mean())
    out["exact_match_without"][k] = float(base_hit.mean())
    out["p_key"][k] = float(np.exp(logp).mean())
    out["p_key_without"][k] = float(np.exp(base_logp).mean())
    out["lift"][k] = float((logp - base_logp[:, None]).mean())
    out["by_depth"][k] = {f"{d:g}": float(v) for d, v in zip(depths, hits.mean(0), strict=True)}
    out.setdefault(
        "compare",
        {
            "metric": "lift",
            "title": "passkey retrieval: lift (nats) of the "
            "key's log probability from the sentence, by evaluation length",
            "caption": "lift: the key's log probability with the key sentence in the text minus "
            "without it, in nats, averaged over the keys and depths (above 0: the model drew on "
            "the sentence); exact matches and probabilities are in each run's metrics.json",
        },
    )


def heatmap(result: dict[str, Any], title: str) -> np.ndarray | None:
    """Exact match by length (rows) and depth (columns) as an RGB image."""
    rows = [str(n) for n in result["lengths"] if str(n) in result["by_depth"]]
    if not rows:
        return None
    # deferred: matplotlib only when the figure is drawn
    import matplotlib

    matplotlib.use("Agg")
    # deferred: matplotlib only when the figure is drawn
    import matplotlib.pyplot as plt

    grid = np.array([[result["by_depth"][r][f"{d:g}"] for d in result["depths"]] for r in rows])
    fig, ax = plt.subplots(figsize=(1.2 * len(result["depths"]) + 2, 0.6 * len(rows) + 1.6))
    shown = ax.imshow(grid, vmin=0, vmax=1, cmap="viridis", aspect="auto")
    ax.set_xticks(range(len(result["depths"])), [f"{d:g}" for d in result["depths"]])
    ax.set_yticks(range(len(rows)), rows)
    ax.set_xlabel("depth of the key sentence (0 = start of the text, 1 = before the question)")
    ax.set_ylabel("evaluation length (tokens)")
    ax.set_title(f"passkey exact match — {title}")
    for (i, j), v in np.ndenumerate(grid):
        ax.text(j, i, f"{v:.2f}", ha="center", va="center", color="w" if v < 0.6 else "k")
    fig.colorbar(shown, ax=ax)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    plt.close(fig)
    buf.seek(0)
    return np.asarray(plt.imread(buf, format="png")[..., :3] * 255, dtype=np.uint8)
