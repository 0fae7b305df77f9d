"""`posenc eval RUN_DIR [OVERRIDES]`: evaluate a trained run again, or on other text.

The run's saved config (loaded through config.rundir, which trusts none of it) and
checkpoints/last.pt define the model; only the evaluation (eval.*), the evaluated text
(data=NAME, data.*), the device and the precision may change. Text other than the run's own
corpus is tokenized with the run's tokenizer (data/eval_text.py). Results are merged into
metrics.json and TensorBoard under the keys of evals/keys.py.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from posenc_cli.common.errors import PosencError
from posenc_cli.common.run_layout import RunDir
from posenc_cli.config.compose import validate
from posenc_cli.config.effect_checks import check_effects
from posenc_cli.config.eval_sections import eval_option
from posenc_cli.config.groups import config_dir
from posenc_cli.config.overrides import check_group_choices, given, parse
from posenc_cli.config.run_config import RunConfig, typed
from posenc_cli.config.rundir import load_run_config, lock_run_dir, refuse_in_use, unlock_run_dir
from posenc_cli.data.cache import TokenData, cache_root
from posenc_cli.data.config import DataConfig
from posenc_cli.data.eval_text import encode_for_eval
from posenc_cli.data.hf_corpus import SOURCE_KEYS
from posenc_cli.data.prepare import prepare
from posenc_cli.data.sources import open_corpus
from posenc_cli.data.tokenizer import check_not_byte_level
from posenc_cli.engine import checkpoint
from posenc_cli.engine.build import build_model
from posenc_cli.engine.memory import check_evaluation_memory
from posenc_cli.engine.metrics import merge_metrics, read_metrics
from posenc_cli.engine.runtime import Runtime, make_runtime
from posenc_cli.engine.saved_config import check_saved_config
from posenc_cli.evals.base import get_task
from posenc_cli.evals.keys import data_label, result_key
from posenc_cli.evals.runner import run_tasks
from posenc_cli.evals.writers import (
    EvalWriters,
    refuse_non_finite,
    replaces_finite,
    take_records,
    write_records,
)
from posenc_cli.model import TransformerLM

#: Data settings that change which tokens are evaluated.
TOKEN_FIELDS = ("kind", "path", "val_path", "val_every_nth", *SOURCE_KEYS, "train_tokens")
ALLOWED = "eval.*, eval=NAME, data=NAME, data.*, device, train.precision and train.attention"


def evaluate_run(run_dir: Path, overrides: list[str]) -> tuple[RunConfig, dict[str, Any]]:
    """Evaluate ``run_dir``'s last checkpoint; merge into metrics.json; the config used and
    the results by key (each result says whether it replaced an earlier one)."""
    composed, metrics = load_run_config(run_dir), read_metrics(run_dir)
    saved, cfg = typed(composed), typed(apply_overrides(composed, overrides))
    pin_precision(cfg, metrics, overrides)
    for name in cfg.eval.tasks:
        get_task(name).check(cfg)
    rt = make_runtime(cfg)
    check_evaluation_memory(cfg, rt.device.type == "cuda")
    refuse_in_use(run_dir)  # the lock itself once the checkpoint and the data are read
    model = load_model(run_dir, cfg, rt)
    data = data_for(cfg, saved, run_dir, metrics, model.vocab_size)
    lock_run_dir(run_dir)
    try:
        return _evaluate(run_dir, cfg, saved, rt, metrics, model, data)
    finally:
        unlock_run_dir(run_dir)  # free for the next command of this process (a grid, a test)


def _evaluate(
    run_dir: Path,
    cfg: RunConfig,
    saved: RunConfig,
    rt: Runtime,
    metrics: dict[str, Any],
    model: TransformerLM,
    data_and_label: tuple[Any, str | None, dict[str, Any]],
) -> tuple[RunConfig, dict[str, Any]]:
    """Every task of ``cfg`` on the run's last checkpoint, merged into metrics.json."""
    data, label, source = data_and_label
    suffix, ev = identity_suffix(rt, metrics, model.attention_kernel), cfg.eval.extrapolation
    writers = EvalWriters(run_dir)
    try:
        out = run_tasks(
            model,
            data,
            cfg,
            rt,
            None,
            data_name=label or cfg.data.name,
            key_for=lambda task: result_key(task, label, ev, saved.eval.extrapolation, suffix),
            writer_for=writers.get,
            extra={"source": source},
        )
    except BaseException:  # an evaluation that did not finish replaces no earlier curve
        writers.close(keep_earlier=writers.open)
        raise
    kept = replaces_finite(out, metrics)
    writers.close(keep_earlier=kept)
    files = take_records(out)
    out = {key: result for key, result in out.items() if key not in kept}
    for key in out:
        out[key]["replaced_earlier"] = key in metrics
    record(run_dir, cfg, metrics, out)
    write_records(run_dir, files, out)
    refuse_non_finite(kept)
    return cfg, out


def identity_suffix(rt: Runtime, metrics: dict[str, Any], attention: str) -> list[str]:
    """The precision, device and attention kernel, where they differ from the ones the run
    trained with, so a result of another precision never lands on the run's own key."""
    out = []
    if metrics.get("precision") not in (None, rt.precision):
        out.append(rt.precision)
    if metrics.get("device") not in (None, rt.device.type):
        out.append(rt.device.type)
    if attention != metrics.get("attention", "sdpa"):
        out.append(attention)
    return out


def apply_overrides(saved: DictConfig, overrides: list[str]) -> DictConfig:
    """The saved config with eval/data/device overrides applied on top, validated."""
    parsed = parse(overrides)
    for ov in parsed:
        key = ov.key_or_group
        if ov.is_sweep_override() or ov.is_delete():
            raise PosencError(
                f"'{ov.input_line}': posenc eval takes one value per key",
                "evaluate each setting with its own command",
            )
        if (
            key not in ("data", "eval", "device", "train.precision", "train.attention")
            and not key.startswith(("data.", "eval."))
            or key == "data.vocab_size"
        ):
            raise PosencError(
                f"cannot change '{key}' of a trained run (the run fixes it)",
                f"override only {ALLOWED}",
            )
    check_group_choices(overrides)
    cfg = copy.deepcopy(saved)
    for ov in parsed:
        if ov.key_or_group == "data":
            cfg.data = OmegaConf.load(config_dir() / "data" / f"{ov.value()}.yaml")
        elif ov.key_or_group == "eval":
            cfg.eval = eval_option(str(ov.value()))
    for ov in parsed:
        if ov.key_or_group not in ("data", "eval"):
            OmegaConf.update(cfg, ov.key_or_group, ov.value(), merge=False, force_add=True)
    validate(cfg)
    check_effects(cfg, overrides)
    return cfg


def load_model(run_dir: Path, cfg: RunConfig, rt: Runtime) -> TransformerLM:
    """The run's model with the weights of checkpoints/last.pt (loaded weights_only)."""
    path, saved = last_checkpoint(run_dir)
    return model_from_checkpoint(path, saved, cfg, rt)


def last_checkpoint(run_dir: Path) -> tuple[Path, dict[str, Any]]:
    """checkpoints/last.pt of a trained run and its contents (loaded weights_only)."""
    path = RunDir(run_dir).checkpoint("last")
    if not path.is_file():
        raise PosencError(
            f"no checkpoint at '{path}'",
            "use a run that has trained at least until its first checkpoint",
        )
    return path, checkpoint.load(path)


def model_from_checkpoint(
    path: Path, saved: dict[str, Any], cfg: RunConfig, rt: Runtime
) -> TransformerLM:
    """The model of ``cfg`` with the weights of a loaded checkpoint, a mismatch (of shapes,
    then of the config the weights were saved with) as one line."""
    state = saved["model"]
    try:
        model = build_model(cfg, int(state["lm_head.weight"].shape[0]))
        model.load_state_dict(state)
    except (RuntimeError, KeyError, AttributeError, IndexError) as exc:
        lines = [ln.strip() for ln in str(exc).strip().splitlines() if ln.strip()]
        why = "; ".join(lines[1:] if len(lines) > 1 else lines)  # torch's first line is a title
        why = why if len(why) <= 200 else why[:197] + "..."
        raise PosencError(
            f"checkpoint '{path}' does not match the run's config ({why})",
            "restore the run's .hydra/config.yaml",
        ) from None
    check_saved_config(saved, cfg, path)
    model = model.to(rt.device)  # a layer's FlexAttention form may depend on the device
    if model.use_attention(rt.attention) != rt.attention:
        raise PosencError(
            f"train.attention=flex: no layer of this run ({cfg.encoding.name}) has a "
            f"FlexAttention form on {rt.device.type}",
            "evaluate without train.attention=flex (docs/performance.md, FlexAttention)",
        )
    return model


def run_tokenizer(run_dir: Path, saved: RunConfig) -> Path:
    """The tokenizer the run trained with: its copy in the run directory (training keeps one),
    else the run's data cache (rebuilt if it is gone). A path recorded in metrics.json is not
    followed: the run directory may come from someone else."""
    copy_path = RunDir(run_dir).tokenizer_file
    if copy_path.is_file():
        return copy_path
    return prepare(saved.data).tokenizer_path


def _same_data(cfg: RunConfig, saved: RunConfig) -> bool:
    def norm(data: DataConfig, field: str) -> Any:
        value = getattr(data, field)
        if field in ("path", "val_path") and value is not None:
            return Path(str(value)).expanduser().resolve()
        return value

    return all(norm(cfg.data, f) == norm(saved.data, f) for f in TOKEN_FIELDS)


def eval_data(
    cfg: RunConfig, saved: RunConfig, run_dir: Path, imported: bool = False
) -> tuple[TokenData, str | None, dict[str, Any]]:
    """Held-out ids, a label (None for the run's own data) and where the text came from. An
    imported run has a tokenizer of its own, so its text is always encoded with it."""
    tokenizer = run_tokenizer(run_dir, saved)
    check_not_byte_level(tokenizer)  # before anything is read or cached
    source = data_source(cfg.data)
    if imported and _same_data(cfg, saved):
        return encode_for_eval(cfg.data, tokenizer, held_out=True), None, source
    if _same_data(cfg, saved):
        data = prepare(cfg.data)
        if data.tokenizer_path.read_bytes() == tokenizer.read_bytes():
            return data, None, source
        return encode_for_eval(cfg.data, tokenizer, held_out=True), None, source
    held_out = cfg.data.val_path is not None
    data = encode_for_eval(cfg.data, tokenizer, held_out=held_out)
    return data, data_label(cfg, saved, source["hash"]), source


def data_source(data_cfg: DataConfig) -> dict[str, Any]:
    """The evaluated text: its name, its files and a short hash of their content."""
    corpus = open_corpus(data_cfg)
    digest = corpus.fingerprint(cache_root(data_cfg))
    return {
        "name": data_cfg.name,
        "path": data_cfg.val_path or data_cfg.path or data_cfg.dataset,
        "hash": digest[:8],
    }


def pin_precision(cfg: RunConfig, metrics: dict[str, Any], overrides: list[str]) -> None:
    """Evaluate in the precision the run actually used, not what `auto` means on this machine
    (bf16 on one, fp32 on another), so that re-evaluating gives the run's own numbers; an
    explicit train.precision=... wins."""
    asked = given(overrides, "train.precision")
    used = metrics.get("precision")
    if not asked and cfg.train.precision == "auto" and used in ("fp32", "bf16"):
        cfg.train.precision = used


def data_for(
    cfg: RunConfig, saved: RunConfig, run_dir: Path, metrics: dict[str, Any], vocab_size: int
) -> tuple[Any, str | None, dict[str, Any]]:
    """The tokens to evaluate on, their label and source (none for a synthetic task, which
    scores its own fixed test sets); refuses a tokenizer the model does not match (an imported
    model may have more embedding rows than its tokenizer has tokens)."""
    if cfg.task.synthetic:
        return None, None, {"name": f"task:{cfg.task.name}"}
    imported = bool(metrics.get("imported"))
    data, label, source = eval_data(cfg, saved, run_dir, imported)
    tokens = int(data.meta["vocab_size"]) if data is not None else vocab_size
    if tokens > vocab_size or (tokens < vocab_size and not imported):
        raise PosencError(
            f"the tokenizer has {tokens} tokens but the model {vocab_size}",
            "evaluate with the run's own data cache",
        )
    return data, label, source


def record(run_dir: Path, cfg: RunConfig, metrics: dict[str, Any], out: dict[str, Any]) -> None:
    """Merge the results into metrics.json, keeping every earlier key not evaluated again."""
    merge_metrics(
        run_dir,
        {
            "encoding": cfg.encoding.name,
            "seed": cfg.seed,
            "train_length": cfg.train.context_length,
            **metrics,
            **out,
        },
    )
