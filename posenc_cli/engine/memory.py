"""Memory preflight: a lower estimate of what a run allocates, checked before anything exists.

The estimate counts only what the run cannot avoid holding at once — weights, gradients and
AdamW's two moments; one layer's activations per stored layer and the logits of a training
batch; the list of validation windows and one validation batch; the evaluation's largest
forward — so a run it refuses could not have run, and a run it passes may still need more
(attention workspaces depend on the encoding's path). Sizes are per rank: every rank holds a
replica and its own batch.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from posenc_cli.common.errors import PosencError
from posenc_cli.common.layer_pattern import layer_kinds
from posenc_cli.common.sizes import default_d_ff
from posenc_cli.config.layer_encodings import layer_encoding_config, other_encodings
from posenc_cli.config.run_config import RunConfig
from posenc_cli.encodings.names import META_KEYS

FLOAT = 4
#: Bytes of one int in a Python list (the pointer and the int object): validation's starts.
LIST_INT = 36
#: Floats saved per token and layer for the backward pass (a lower count: the block's inputs,
#: q, k, v, the attention output and the feed-forward's three projections).
SAVED_PER_TOKEN = 8
#: Tokens of one evaluation forward (evals/scoring.py batches windows to this many).
EVAL_BATCH_TOKENS = 2048
#: The quick model's sizes (configs/model/quick.yaml, its d_ff derived): the yardstick by
#: which the key that makes a model too large is named, the one furthest above it.
YARDSTICK = {"model.d_model": 128, "model.n_layers": 4, "model.d_ff": 384, "data.vocab_size": 4096}


@dataclass(frozen=True)
class Need:
    """One thing that must fit: the key that sizes it and its estimate in bytes."""

    key: str
    what: str
    bytes: int


def model_key(cfg: RunConfig, vocab: int) -> str:
    """The key of the model's size furthest above the quick model's (model.d_model on a tie,
    and when d_ff is derived from it)."""
    m = cfg.model
    sizes = {
        "model.d_model": m.d_model,
        "model.n_layers": m.n_layers,
        "model.d_ff": m.d_ff or 0,
        "data.vocab_size": vocab,
    }
    return max(YARDSTICK, key=lambda k: sizes[k] / YARDSTICK[k])


def n_params(cfg: RunConfig, vocab: int, own: int | None = None) -> int:
    """Parameters of TransformerLM: embedding and head, attention and SwiGLU per layer, and
    the encoding's own (``own`` when the caller has counted them already)."""
    m = cfg.model
    d = m.d_model
    d_ff = m.d_ff if m.d_ff else default_d_ff(d)
    qk_norm = 2 * (d // m.n_heads) if m.qk_norm else 0
    blocks = m.n_layers * (4 * d * d + 3 * d * d_ff + 2 * d + qk_norm)
    return 2 * vocab * d + blocks + d + (encoding_weights(cfg) if own is None else own)


#: An encoding whose integer parameters all stay below this is counted by building it on the
#: CPU (its tables hold at most this many rows); a larger one on torch's meta device, which
#: allocates nothing but costs an import of torch._dynamo (about 1.5 s) the first time.
SMALL_TABLE = 1 << 16


def encoding_weights(cfg: RunConfig) -> int:
    """The parameters of the encodings, all of them (``encodings_weights``)."""
    return sum(encodings_weights(cfg).values())


def encodings_weights(cfg: RunConfig) -> dict[str, int]:
    """The parameters of the run's encoding (``encoding``) and of each other one model.layers
    names, each held for its own layers only, so a table sized by a config (encoding=learned's
    max_len, a named T5's buckets) is refused before it exists: counted on the meta device
    (shapes, no memory) when a parameter could size a large one, else on the CPU."""
    import torch  # deferred: the estimate's arithmetic needs no torch

    from posenc_cli.encodings import build_encoding

    m = cfg.model
    run = cfg.encoding.name
    sections = {"encoding": cfg.encoding.as_yaml()} | {
        name: layer_encoding_config(name, m.layer_encodings[name])
        for name in other_encodings(m.layers, run)
    }
    kinds = layer_kinds(m.layers, m.n_layers, run)
    counts = {}
    for kind, section in sections.items():
        values = [v for k, v in section.items() if k not in META_KEYS]
        large = any(type(v) is int and v >= SMALL_TABLE for v in values)
        with torch.device("meta" if large else "cpu"):
            enc = build_encoding(section, m.d_model, m.n_heads, m.n_layers)
        enc.keep_layers([layer for layer, used in enumerate(kinds) if used == kind])
        counts[kind] = sum(p.numel() for p in enc.parameters())
    return counts


def forward_bytes(cfg: RunConfig, vocab: int, tokens: int, backward: bool) -> int:
    """Activations of a forward over ``tokens`` tokens: the logits (and their gradient), and
    the saved activations of every layer when a backward follows (one layer's otherwise)."""
    d = cfg.model.d_model
    layers = cfg.model.n_layers
    logits = tokens * vocab * FLOAT * (2 if backward else 1)
    saved = tokens * d * SAVED_PER_TOKEN * FLOAT * (layers if backward else 1)
    return logits + saved


def training_needs(cfg: RunConfig, vocab: int) -> list[Need]:
    """What a training run holds, by the key that makes it large."""
    t = cfg.train
    B = t.batch_size
    L = t.context_length
    weights = encodings_weights(cfg)
    state = n_params(cfg, vocab, sum(weights.values())) * FLOAT * 4  # weights, grads, AdamW
    windows = t.eval_batches * B
    longest = L * max(cfg.eval.extrapolation.factors)
    eval_batch = max(1, EVAL_BATCH_TOKENS // longest) * longest
    return [
        *(_encoding_need(cfg, kind, count) for kind, count in weights.items()),
        Need(model_key(cfg, vocab), "the model with gradients and optimizer state", state),
        Need(
            "train.batch_size",
            "a training batch",
            state + forward_bytes(cfg, vocab, B * L, backward=True),
        ),
        Need(
            "train.eval_batches",
            "the validation windows and one validation batch",
            state + windows * LIST_INT + forward_bytes(cfg, vocab, B * L, backward=False),
        ),
        Need(
            "eval.factors",
            f"the evaluation's longest forward ({longest} tokens)",
            state // 4 + forward_bytes(cfg, vocab, eval_batch, backward=False),
        ),
    ]


def _encoding_need(cfg: RunConfig, kind: str, count: int) -> Need:
    """An encoding's own weights with gradients and optimizer state, by the keys that size
    them: the run's encoding's, or model.layer_encodings.NAME's for another one."""
    state = "weights with gradients and optimizer state"
    if kind == "encoding":
        key = "encoding.max_len" if "max_len" in cfg.encoding.params else "encoding.*"
        return Need(key, f"encoding={cfg.encoding.name}'s own {state}", count * FLOAT * 4)
    return Need(f"model.layer_encodings.{kind}.*", f"{kind}'s {state}", count * FLOAT * 4)


def evaluation_needs(cfg: RunConfig, vocab: int) -> list[Need]:
    """`posenc eval` of a trained run: its weights, twice while the checkpoint is read into
    the model, and the evaluation's longest forward."""
    weights = n_params(cfg, vocab) * FLOAT
    longest = cfg.train.context_length * max(cfg.eval.extrapolation.factors)
    batch = max(1, EVAL_BATCH_TOKENS // longest) * longest
    return [
        Need("model.d_model", "the run's weights, read from its checkpoint", 2 * weights),
        Need(
            "eval.factors",
            f"the evaluation's longest forward ({longest} tokens)",
            weights + forward_bytes(cfg, vocab, batch, backward=False),
        ),
    ]


#: The fix for `posenc eval`, by the key its estimate names (the model is the run's).
EVALUATION_KEYS = {
    "model.d_model": "evaluate the run on a machine with more memory",
    "eval.factors": "lower the longest of eval.factors until it fits",
}


def inspect_needs(cfg: RunConfig, vocab: int) -> list[Need]:
    """`posenc inspect` of a config: the model and one forward of train.context_length."""
    L = cfg.train.context_length
    weights = n_params(cfg, vocab) * FLOAT
    return [
        Need(model_key(cfg, vocab), "the model (its weights)", weights),
        Need(
            "train.context_length",
            f"a forward of {L} tokens",
            weights + forward_bytes(cfg, vocab, L, backward=False),
        ),
    ]


def available_bytes() -> int:
    """Memory a new allocation can get now: MemAvailable on Linux, else the physical total."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def gpu_available_bytes() -> int:
    """Free memory of the current CUDA device."""
    import torch  # only for a CUDA run

    return int(torch.cuda.mem_get_info()[0])


#: The fix for `posenc extend`, by the key its training estimate names: it takes its model
#: and its training and evaluation settings from the parent, so it lowers its own keys.
EXTENSION_KEYS = {
    **{key: "extend the parent on a machine with more memory" for key in YARDSTICK},
    "train.batch_size": "lower extend.batch_size or extend.factor until it fits",
    "train.eval_batches": "lower extend.factor until it fits",
    "eval.factors": "lower extend.factor until it fits",
}


def check_fits(
    needs: list[Need],
    available: int,
    where: str,
    ranks: int = 1,
    instead: dict[str, str] | None = None,
) -> None:
    """One line naming the first key whose estimate (per rank, times ``ranks`` sharing
    ``available``) does not fit; ``instead``: the fix by key, in the keys the command
    accepts (default: lower that key)."""
    for need in needs:
        total = need.bytes * ranks
        if total > available:
            per_rank = f" per rank, {ranks} ranks" if ranks > 1 else ""
            default = f"lower {need.key} (or the model's size) until it fits"
            raise PosencError(
                f"{need.key}: {need.what} needs at least {gib(need.bytes)}{per_rank} but "
                f"{gib(available)} of {where} is available",
                (instead or {}).get(need.key, default),
            )


def gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**27 else f"{n / 2**20:.0f} MiB"


def check_training_memory(cfg: RunConfig, cuda: bool) -> None:
    """Host memory for every rank on CPU; each GPU's own memory (one rank per GPU) on CUDA."""
    needs = training_needs(cfg, cfg.data.vocab_size)
    instead = EXTENSION_KEYS if cfg.extend.parent is not None else None
    if cuda:
        check_fits(needs, gpu_available_bytes(), "GPU memory", instead=instead)
    else:
        check_fits(needs, available_bytes(), "memory", cfg.train.nproc, instead)


def check_evaluation_memory(cfg: RunConfig, cuda: bool) -> None:
    """Before the model is loaded: the evaluation's needs against this device's memory."""
    needs = evaluation_needs(cfg, cfg.data.vocab_size)
    if cuda:
        check_fits(needs, gpu_available_bytes(), "GPU memory", instead=EVALUATION_KEYS)
    else:
        check_fits(needs, available_bytes(), "memory", instead=EVALUATION_KEYS)


def check_inspect_memory(cfg: RunConfig) -> None:
    check_fits(inspect_needs(cfg, cfg.data.vocab_size), available_bytes(), "memory")
