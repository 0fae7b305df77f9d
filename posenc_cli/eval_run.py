"""`posenc eval RUN_DIR [OVERRIDES]`: evaluate a trained run again, or on other text.

The run's saved config and checkpoints/last.pt define the model; only the evaluation (eval.*),
the evaluated text (data=NAME, data.*) and the device may change. Text other than the run's own
corpus is tokenized with the run's tokenizer (data/ood.py).

Where results go: metrics.json (merged) and TensorBoard, under one key that is also the tag
prefix. ``extrapolation`` is the run's own data scored with its own eval settings (what training
wrote; re-running it reproduces it). Anything else gets a suffix per difference, in this order:
``_<data label>`` for other text, ``_<protocol>`` (``sliding8``, ``sliding``, ``nonoverlapping``)
for another mode or stride, ``_t<tokens>`` for another eval.tokens, ``_x<f1-f2-..>`` for other
eval.factors — e.g. ``extrapolation_sliding8``, ``extrapolation_text_other_x1-16`` — so other
evaluations never overwrite the main curve (eval.position_buckets changes only the curve's
resolution and adds no suffix). The data label is data.name, plus the file's stem when the name
is the generic ``text`` or the run's own data name; set data.name=NAME to choose it.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from rich.table import Table
from torch.utils.tensorboard import SummaryWriter

from posenc_cli import checkpoint
from posenc_cli.config import _parse, check_group_choices, config_dir, validate
from posenc_cli.data.dataset import TokenData, prepare
from posenc_cli.data.ood import encode_for_eval
from posenc_cli.errors import PosencError
from posenc_cli.evaluate import PRIMARY, evaluate_model
from posenc_cli.model import TransformerLM, build_model
from posenc_cli.progress import console
from posenc_cli.runtime import Runtime, make_runtime

#: Data settings that change which tokens are evaluated.
TOKEN_FIELDS = ("kind", "path", "val_path", "val_every_nth")
ALLOWED = "eval.*, eval=NAME, data=NAME, data.*, device and train.precision"


def evaluate_run(run_dir: Path, overrides: list[str]) -> dict[str, Any]:
    """Evaluate ``run_dir``'s last checkpoint; merge into metrics.json; print a table."""
    saved = load_run_config(run_dir)
    cfg = apply_overrides(saved, overrides)
    pin_precision(cfg, _read_metrics(run_dir), overrides)
    rt = make_runtime(cfg)
    model = load_model(run_dir, cfg, rt)
    data, label = eval_data(cfg, saved, run_dir)
    if int(data.meta["vocab_size"]) != model.vocab_size:
        raise PosencError(f"the tokenizer has {data.meta['vocab_size']} tokens but the model "
                          f"{model.vocab_size}", "evaluate with the run's own data cache")
    key = result_key(label, cfg.eval, saved.eval)
    writer = SummaryWriter(str(run_dir))
    try:
        out = evaluate_model(model, data, cfg, rt, writer, key=key,
                             data_name=label or str(cfg.data.name))
    finally:
        writer.close()
    merge_metrics(run_dir, cfg, out)
    print_result(run_dir, cfg, key, out[key])
    return out


def load_run_config(run_dir: Path) -> DictConfig:
    saved = run_dir / ".hydra" / "config.yaml"
    if not saved.is_file():
        raise PosencError(f"'{run_dir}' is not a posenc run directory (no .hydra/config.yaml)",
                          "pass the directory a `posenc train` run created")
    cfg = OmegaConf.load(saved)
    assert isinstance(cfg, DictConfig)
    return cfg


def apply_overrides(saved: DictConfig, overrides: list[str]) -> DictConfig:
    """The saved config with eval/data/device overrides applied on top, validated."""
    parsed = _parse(overrides)
    for ov in parsed:
        key = ov.key_or_group
        if ov.is_sweep_override() or ov.is_delete():
            raise PosencError(f"'{ov.input_line}': posenc eval takes one value per key",
                              "evaluate each setting with its own command")
        if key not in ("data", "eval", "device", "train.precision") \
                and not key.startswith(("data.", "eval.")):
            raise PosencError(f"posenc eval cannot change '{key}' (the run fixes it)",
                              f"override only {ALLOWED}")
    check_group_choices(overrides)
    cfg = copy.deepcopy(saved)
    for ov in parsed:
        if ov.key_or_group in ("data", "eval"):
            cfg[ov.key_or_group] = OmegaConf.load(
                config_dir() / ov.key_or_group / f"{ov.value()}.yaml")
    for ov in parsed:
        if ov.key_or_group not in ("data", "eval"):
            OmegaConf.update(cfg, ov.key_or_group, ov.value(), merge=False, force_add=True)
    validate(cfg)
    return cfg


def load_model(run_dir: Path, cfg: DictConfig, rt: Runtime) -> TransformerLM:
    """The run's model with the weights of checkpoints/last.pt (loaded weights_only)."""
    path = run_dir / "checkpoints" / "last.pt"
    if not path.is_file():
        raise PosencError(f"no checkpoint at '{path}'",
                          "evaluate a run that has trained at least until its first checkpoint")
    state = checkpoint.load(path)["model"]
    model = build_model(cfg, int(state["lm_head.weight"].shape[0]))
    try:
        model.load_state_dict(state)
    except (RuntimeError, KeyError) as exc:
        first = str(exc).strip().splitlines()[0][:160]
        raise PosencError(f"checkpoint '{path}' does not match the run's config ({first})",
                          "restore the run's .hydra/config.yaml") from None
    return model.to(rt.device)


def run_tokenizer(run_dir: Path, saved: DictConfig) -> Path:
    """The tokenizer the run trained with: its copy in the run directory (train.py keeps one),
    else the path metrics.json records, else the run's data cache (rebuilt if it is gone)."""
    copy_path = run_dir / "tokenizer.json"
    if copy_path.is_file():
        return copy_path
    recorded = _read_metrics(run_dir).get("tokenizer")
    if recorded and Path(recorded).is_file():
        return Path(recorded)
    return prepare(saved.data).tokenizer_path


def _same_data(cfg: DictConfig, saved: DictConfig) -> bool:
    def norm(data: DictConfig, field: str) -> Any:
        value = data.get(field)
        if field in ("path", "val_path") and value is not None:
            return Path(str(value)).expanduser().resolve()
        return value

    return all(norm(cfg.data, f) == norm(saved.data, f) for f in TOKEN_FIELDS)


def eval_data(cfg: DictConfig, saved: DictConfig, run_dir: Path) -> tuple[TokenData, str | None]:
    """Held-out ids and a label (None for the run's own data)."""
    tokenizer = run_tokenizer(run_dir, saved)
    if _same_data(cfg, saved):
        data = prepare(cfg.data)
        if data.tokenizer_path.read_bytes() == tokenizer.read_bytes():
            return data, None
        return encode_for_eval(cfg.data, tokenizer, held_out=True), None
    held_out = cfg.data.get("val_path") is not None
    return encode_for_eval(cfg.data, tokenizer, held_out=held_out), data_label(cfg, saved)


def data_label(cfg: DictConfig, saved: DictConfig) -> str:
    name = str(cfg.data.name)
    source = cfg.data.get("val_path") or cfg.data.get("path")
    if name in ("text", str(saved.data.name)) and source:
        name = f"{name}_{Path(str(source)).stem}"
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)


def protocol(ev: Any) -> str:
    if ev.mode != "sliding":
        return str(ev.mode)
    return "sliding" if ev.stride is None else f"sliding{int(ev.stride)}"


def result_key(label: str | None, ev: Any, saved_ev: Any) -> str:
    """PRIMARY, plus the data label and every scoring setting that differs from the run's."""
    parts = [PRIMARY] if label is None else [PRIMARY, label]
    if protocol(ev) != protocol(saved_ev):
        parts.append(protocol(ev))
    if int(ev.tokens) != int(saved_ev.tokens):
        parts.append(f"t{int(ev.tokens)}")
    factors = sorted({int(f) for f in ev.factors})
    if factors != sorted({int(f) for f in saved_ev.factors}):
        parts.append("x" + "-".join(map(str, factors)))
    return "_".join(parts)


def pin_precision(cfg: DictConfig, metrics: dict[str, Any], overrides: list[str]) -> None:
    """Evaluate in the precision the run actually used, not what `auto` means on this machine
    (bf16 on one, fp32 on another), so that re-evaluating gives the run's own numbers; an
    explicit train.precision=... wins."""
    asked = any(o.split("=", 1)[0].lstrip("+") == "train.precision" for o in overrides)
    used = metrics.get("precision")
    if not asked and cfg.train.precision == "auto" and used in ("fp32", "bf16"):
        cfg.train.precision = used


def _read_metrics(run_dir: Path) -> dict[str, Any]:
    try:
        data = json.loads((run_dir / "metrics.json").read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def merge_metrics(run_dir: Path, cfg: DictConfig, out: dict[str, Any]) -> None:
    """Add ``out`` to metrics.json, keeping everything else (a stopped run gets its identity)."""
    from posenc_cli.train import write_metrics

    metrics = _read_metrics(run_dir)
    metrics.setdefault("encoding", str(cfg.encoding.name))
    metrics.setdefault("seed", int(cfg.seed))
    metrics.setdefault("train_length", int(cfg.train.context_length))
    metrics.update(out)
    write_metrics(run_dir, metrics)


def print_result(run_dir: Path, cfg: DictConfig, key: str, result: dict[str, Any]) -> None:
    """A table of ppl by length, then where the numbers were written."""
    mode = protocol(cfg.eval)
    table = Table(title=f"{key}: {cfg.encoding.name} (seed {cfg.seed}) on {result['data']} — "
                        f"{result['tokens']:,} tokens, {mode}")
    for col in ("length", "factor", "ppl", "loss", "seconds", "note"):
        table.add_column(col, justify="left" if col == "note" else "right")
    train_length = int(result["train_length"])
    for length in result["lengths"]:
        k = str(length)
        ppl, loss = result["ppl"][k], result["loss"][k]
        table.add_row(k, f"x{length // train_length}", f"{ppl:.2f}" if ppl is not None else "n/a",
                      f"{loss:.4f}" if loss is not None else "-",
                      f"{result['seconds'].get(k, 0):.1f}" if k in result["seconds"] else "-",
                      result["skipped"].get(k, ""))
    console.print(table)
    for note in result["notes"]:
        console.print(f"note: {note}")
    console.print(f"written to {run_dir / 'metrics.json'} under \"{key}\" and TensorBoard "
                  f"tags {key}/*", soft_wrap=True)

