"""Passkey retrieval by distance (Mohtashami & Jaggi 2023): does the language model use a
fact stated once, far back in its context?

A five-digit key is stated once ("the pass key is 71432. remember it.") at a depth of held-out
text, and the text ends with the question "the pass key is". Each digit is one token (the
tokenizer's own token for the digit), so every key has the same five answer positions and the
scores below have exact chance levels. Scored teacher-forced on the key, without sampling noise:

* digit accuracy — at each of the five positions, is the true digit the likeliest of the ten?
  Chance: 0.1. Informative where whole keys are never right;
* exact match — every key token the argmax of the whole vocabulary (what greedy decoding would
  write). Chance: about 0;
* lift — the key's log probability with the key sentence minus without it (the same text with
  the sentence removed), in nats, with a 95 % bootstrap interval over the instances. Chance: 0.

Each instance has its own key, its own stretch of held-out text and a depth, the depths cycling
through eval.retrieval.depths; keys, text and depths come from eval.retrieval.seed and the
length, so every run sees the same instances.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from rich.table import Table

from posenc_cli.common.rules import key
from posenc_cli.common.run_layout import RunDir
from posenc_cli.config.run_config import RunConfig
from posenc_cli.data.passkey_text import KEY_DIGITS, digit_ids, key_tokens
from posenc_cli.evals.base import RECORDS, EvalTask, by_length
from posenc_cli.evals.instance_scores import rows_digest, scores_csv
from posenc_cli.evals.result_view import MetricTable, ResultView
from posenc_cli.evals.retrieval_figure import heatmap

if TYPE_CHECKING:
    from torch import Tensor, nn
    from torch.utils.tensorboard import SummaryWriter

    from posenc_cli.data.cache import TokenData
    from posenc_cli.engine.runtime import Runtime

#: Rows of one forward are bounded by this many tokens.
BATCH_TOKENS = 16_384
RESAMPLES = 1000


@dataclass(frozen=True)
class Instance:
    """One key at one length and depth: the text with the key sentence, and without it."""

    key: str
    answer: list[int]
    depth: float
    with_key: list[int]
    without: list[int]


def instances(
    val: np.ndarray,
    encode: Any,
    digits: list[int],
    length: int,
    depths: list[float],
    n: int,
    seed: int,
) -> list[Instance]:
    """``n`` instances of ``length`` tokens each (question and answer included)."""
    rng = np.random.default_rng([seed, length])
    out = []
    for i in range(n):
        key = "".join(str(int(d)) for d in rng.integers(0, 10, KEY_DIGITS))
        sentence, question, answer = key_tokens(encode, digits, key)
        room = length - len(sentence) - len(question) - len(answer)
        offsets = len(val) - room - len(sentence) + 1
        if room < 1 or offsets < 1:  # too short, or more than the held-out text
            return []
        start = int(rng.integers(0, offsets))
        text = [int(t) for t in val[start : start + room]]
        depth = depths[i % len(depths)]
        at = round(depth * room)
        tail = [*question, *answer]
        with_key = [*text[:at], *sentence, *text[at:], *tail]
        out.append(Instance(key, answer, depth, with_key, [*text, *tail]))
    return out


def answer_scores(
    model: nn.Module, rows: list[list[int]], digits: list[int], rt: Runtime
) -> tuple[Tensor, Tensor, Tensor]:
    """Per row, teacher-forced on its last KEY_DIGITS tokens: whether every one is the argmax,
    the fraction that are the likeliest digit, and their summed log probability. Rows are
    left-aligned (a causal model does not see the padding after a row's end)."""
    # deferred: torch only when the task runs; compare finds it without
    import torch

    x = torch.zeros(len(rows), max(map(len, rows)) - 1, dtype=torch.long)
    for i, r in enumerate(rows):
        x[i, : len(r) - 1] = torch.tensor(r[:-1])
    with rt.autocast():
        logits = model(x.to(rt.device)).float().cpu()
    ends = torch.tensor([len(r) - 1 for r in rows])
    at = ends[:, None] - KEY_DIGITS + torch.arange(KEY_DIGITS)[None, :]
    picked = logits[torch.arange(len(rows))[:, None], at]  # (rows, digits, V)
    y = torch.tensor([r[-KEY_DIGITS:] for r in rows])
    logp = picked.log_softmax(-1).gather(-1, y[..., None])[..., 0].sum(-1)
    table = torch.tensor(digits)
    best_digit = table[picked[..., table].argmax(-1)]
    return (picked.argmax(-1) == y).all(-1), (best_digit == y).float().mean(-1), logp


PASSKEYS_FILE = "passkeys.csv"
#: The per-instance scores of PASSKEYS_FILE, each a mean over instances in the result.
PAIRED = ("digit_accuracy", "lift")
#: `posenc compare`'s tables: each score with its chance level, each paired to the baseline.
VIEW = ResultView(
    (
        MetricTable(
            "digit_accuracy",
            "passkey retrieval: digit accuracy (%) by evaluation length",
            "digit accuracy: the share of the key's five digits that were the likeliest of the "
            "ten digits, teacher-forced (100 = every digit retrieved)",
            percent=True,
            chance=0.1,
            bounds=(0.0, 1.0),
        ),
        MetricTable(
            "lift",
            "passkey retrieval: lift (nats) by evaluation length",
            "lift: the key's log probability with the key sentence minus without it (0 = the "
            "sentence does not help)",
            unit="nats",
            chance=0.0,
        ),
    ),
    PASSKEYS_FILE,
    PAIRED,
)


@dataclass
class RetrievalSettings:
    """eval.retrieval.*, typed; configs/eval/tasks/retrieval.yaml holds the values."""

    factors: list[int] = key(lo=1, nonempty=True)
    depths: list[float] = key(lo=0, hi=1, nonempty=True)  # fractions of the filler
    passkeys: int = key(lo=1, hi=20_000)  # 5,000 instances of one length: about 36 s on a CPU
    seed: int = key(lo=0)


class Retrieval(EvalTask):
    name = "retrieval"
    settings_class = RetrievalSettings
    result_view = VIEW

    def run(
        self, model: nn.Module, data: TokenData | None, cfg: RunConfig, rt: Runtime
    ) -> dict[str, Any]:
        assert data is not None  # a language-model task: not_applicable keeps task runs out
        s: RetrievalSettings = self.settings(cfg)
        tok = data.tokenizer
        digits = digit_ids(tok.token_to_id)
        train_length = cfg.base_length()  # a `posenc extend` run: its parent's lengths
        depths = s.depths
        limit = getattr(getattr(model, "encoding", None), "max_len", None)
        out = _empty_result(train_length, depths, s)
        scored: dict[int, tuple[Any, ...]] = {}
        for length in sorted({f * train_length for f in s.factors}):
            out["lengths"].append(length)
            k = str(length)
            if digits is None:
                out["skipped"][k] = "the tokenizer has no token of its own for each digit"
            elif limit is not None and length > limit:
                out["skipped"][k] = f"needs {length} positions; the encoding has {limit}"
            elif cases := instances(
                data.val,
                lambda t: tok.encode(t).ids,
                digits,
                length,
                depths,
                s.passkeys,
                s.seed,
            ):
                scored[length] = _record(out, k, _scores(model, cases, digits, rt), cases)
            else:
                out["skipped"][k] = (
                    "too short for the sentence and the question, or longer than the held-out text"
                )
        if scored:
            out[RECORDS] = {PASSKEYS_FILE: scores_csv(PAIRED, scored)}
        return out

    def log(self, writer: SummaryWriter, key: str, result: dict[str, Any], cfg: RunConfig) -> None:
        """Digit accuracy, exact match and lift with global_step = length; the heatmap."""
        for length in result["lengths"]:
            k = str(length)
            if result["digit_accuracy"].get(k) is not None:
                for metric in ("digit_accuracy", "exact_match", "lift"):
                    writer.add_scalar(f"{key}/{metric}", result[metric][k], length)
        image = heatmap(result, f"{cfg.encoding.name} (seed {cfg.seed})")
        if image is not None:
            writer.add_image(f"{key}/digit_accuracy_by_depth", image, dataformats="HWC")

    def summary(self, result: dict[str, Any]) -> list[tuple[str, str]]:
        acc = result.get("digit_accuracy") or {}
        return [("passkey digit accuracy (chance 0.10)", by_length(acc, 2))] if acc else []

    def render(self, run_dir: Path, cfg: RunConfig, key: str, result: dict[str, Any]) -> list[Any]:
        table = Table(
            title=f"{key}: {cfg.encoding.name} (seed {cfg.seed}), {result['keys']} instances "
            f"per length over {len(result['depths'])} depths; chance: digit accuracy "
            f"{result['chance']['digit_accuracy']:g}, lift 0"
        )
        for col in ("length", "digit acc.", "(no key)", "exact match", "lift (nats) [95 %]"):
            table.add_column(col, justify="right")
        for length in result["lengths"]:
            k = str(length)
            if k in result["skipped"]:
                table.add_row(k, "n/a", "", "", result["skipped"][k])
                continue
            lo, hi = result["lift_interval"][k]
            table.add_row(
                k,
                *(f"{result[m][k]:.3f}" for m in ("digit_accuracy", "digit_accuracy_without")),
                f"{result['exact_match'][k]:.3f}",
                f"{result['lift'][k]:+.3f} [{lo:+.3f}, {hi:+.3f}]",
            )
        return [
            table,
            f'written to {RunDir(run_dir).metrics_file} under "{key}" and TensorBoard '
            f"({run_dir / 'eval' / key})",
        ]


def _scores(model: nn.Module, cases: list[Instance], digits: list[int], rt: Runtime) -> Any:
    """(exact, digit accuracy, log p) of each case, with the key sentence and without it:
    arrays of shape (2, cases), in batches of at most BATCH_TOKENS tokens."""
    # deferred: torch only when the task runs; compare finds it without
    import torch

    rows = [r for c in cases for r in (c.with_key, c.without)]
    step = 2 * max(1, BATCH_TOKENS // (2 * len(rows[0])))  # with and without stay together
    parts = []
    with torch.no_grad():
        for i in range(0, len(rows), step):
            parts.append(torch.stack(answer_scores(model, rows[i : i + step], digits, rt)))
    both = torch.cat(parts, dim=1).double().numpy()  # (3, 2 * cases)
    return both.reshape(3, len(cases), 2).transpose(0, 2, 1)


def _empty_result(train_length: int, depths: list[float], s: RetrievalSettings) -> dict[str, Any]:
    """The result before any length is scored: the settings, chance levels, tables empty."""
    return {
        "train_length": train_length,
        "depths": depths,
        "keys": s.passkeys,
        "seed": s.seed,
        "chance": {"digit_accuracy": 0.1, "exact_match": 10.0**-KEY_DIGITS, "lift": 0.0},
        "lengths": [],
        **{m: {} for m in METRICS},
        "lift_interval": {},
        "by_depth": {},
        "instances_sha256": {},
        "skipped": {},
    }


#: The means kept per length; the first three also without the key sentence.
SCORED = ("digit_accuracy", "exact_match", "p_key")
METRICS = (*SCORED, "lift", *(f"{m}_without" for m in SCORED))


def _record(out: dict[str, Any], k: str, scores: Any, cases: list[Instance]) -> tuple[Any, ...]:
    """The means of one length, the lift's bootstrap interval, accuracy by depth and the
    instances' digest; returns each instance's scores of PAIRED for the record."""
    exact, acc, logp = scores  # each (2, cases): with the key sentence, without it
    gain = logp[0] - logp[1]
    depths = [c.depth for c in cases]
    out["instances_sha256"][k] = rows_digest([r for c in cases for r in (c.with_key, c.without)])
    for name, both in zip(SCORED, (acc, exact, np.exp(logp)), strict=True):
        out[name][k], out[f"{name}_without"][k] = float(both[0].mean()), float(both[1].mean())
    out["lift"][k] = float(gain.mean())
    rng = np.random.default_rng(0)
    boot = gain[rng.integers(0, len(gain), (RESAMPLES, len(gain)))].mean(1)
    out["lift_interval"][k] = [float(np.percentile(boot, 2.5)), float(np.percentile(boot, 97.5))]
    at = np.array(depths)
    out["by_depth"][k] = {  # None: fewer instances than depths left this depth without one
        f"{d:g}": float(acc[0][at == d].mean()) if (at == d).any() else None for d in out["depths"]
    }
    return acc[0], gain
