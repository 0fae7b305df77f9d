"""A Llama-family checkpoint's safetensors read as posenc's state dict.

Only safetensors are read: a checkpoint is someone else's file, and a pickle (.bin, .pt) runs
code when loaded. Names go back through layout.py's tables and the q and k rows from the
halves layout back to interleaved pairs; with tied embeddings the LM head is the embedding,
whether or not the file repeats it.
"""

from __future__ import annotations

import json
from pathlib import Path

from torch import Tensor

from posenc_cli.common.errors import PosencError
from posenc_cli.hf.layout import LAYER_NAMES, OUTER_NAMES, ROTATED, to_pairs

#: Weights in a pickle, which are never loaded.
PICKLES = ("*.bin", "*.pt", "*.pth", "*.ckpt")
#: The safetensors dtypes of weights posenc reads (as float32).
FLOATING = ("F16", "BF16", "F32", "F64")
#: Buffers some checkpoints carry that posenc recomputes.
RECOMPUTED = ("rotary_emb.inv_freq",)


def weight_files(folder: Path) -> list[Path]:
    """The safetensors files of ``folder`` (the shards its index names, if it has one), each a
    regular file inside ``folder``."""
    index = folder / "model.safetensors.index.json"
    files = _shards(folder, index) if index.is_file() else sorted(folder.glob("*.safetensors"))
    if not files:
        pickles = sorted(p.name for pattern in PICKLES for p in folder.glob(pattern))
        if pickles:
            raise PosencError(
                f"{folder} holds its weights only as a pickle ({pickles[0]}), which posenc "
                "never loads",
                "convert them to safetensors (save_pretrained(..., safe_serialization=True))",
            )
        raise PosencError(f"{folder} has no model.safetensors", "point at a model folder")
    for path in files:
        if not path.is_file():  # a FIFO or a device would block the import or never end
            raise PosencError(f"{path} is not a regular file", "restore the checkpoint's weights")
    return files


def _shards(folder: Path, index: Path) -> list[Path]:
    """The files an index's weight_map names: plain file names in ``folder``, never a path
    that leads elsewhere (``../x``, ``/etc/x``)."""
    try:
        weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        raise PosencError(f"{index} cannot be read", "restore the checkpoint's index") from None
    if not isinstance(weight_map, dict):
        raise PosencError(f"{index}: weight_map is not an object", "restore the checkpoint's index")
    names = set(weight_map.values())
    for name in sorted(names, key=str):
        if not isinstance(name, str) or Path(name).name != name or name in ("", ".", ".."):
            raise PosencError(
                f"{index}: weight_map names {name!r:.60}, not a file of the model folder",
                "restore the checkpoint's index",
            )
    return [folder / n for n in sorted(names)]


def read_safetensors(files: list[Path]) -> dict[str, Tensor]:
    """Every tensor of the files as float32; a damaged or missing file, or a tensor that is
    not floating point (an integer or boolean weight is no model's), as one line."""
    # deferred: safetensors is the optional [hf] extra
    from safetensors import SafetensorError, safe_open

    state: dict[str, Tensor] = {}
    for path in files:
        try:
            with safe_open(str(path), framework="pt") as fh:
                for name in fh.keys():
                    dtype = fh.get_slice(name).get_dtype()
                    if dtype not in FLOATING:
                        raise PosencError(
                            f"{path}: {name} is stored as {dtype}, not floating point",
                            "import a checkpoint whose weights are F16, BF16, F32 or F64",
                        )
                    state[name] = fh.get_tensor(name).float()
        except (OSError, SafetensorError) as exc:
            raise PosencError(
                f"{path} cannot be read ({str(exc)[:80]})", "restore the checkpoint's weights"
            ) from None
    return state


def posenc_state(
    hf: dict[str, Tensor], n_layers: int, head_dim: int, tied: bool
) -> dict[str, Tensor]:
    """Llama's names and layout -> posenc's; what maps nowhere stays under its own name, so
    the comparison with the model (importer.py) reports it."""
    biases = sorted(k for k in hf if k.endswith(".bias"))
    if biases:
        raise PosencError(
            f"the checkpoint has biases ({biases[0]}), which posenc's model has none of",
            "import a Llama-family checkpoint without projection biases",
        )
    names = {hf_name: ours for ours, hf_name in OUTER_NAMES.items()}
    for i in range(n_layers):
        for ours, hf_name in LAYER_NAMES.items():
            names[f"model.layers.{i}.{hf_name}"] = f"layers.{i}.{ours}"
    out: dict[str, Tensor] = {}
    for name, tensor in hf.items():
        if name.endswith(RECOMPUTED):
            continue
        ours = names.get(name, name)
        rotated = ours.startswith("layers.") and ours.split(".", 2)[-1] in ROTATED
        if rotated and tensor.ndim == 2 and tensor.shape[0] % head_dim == 0:
            tensor = to_pairs(tensor, head_dim, head_dim)
        out[ours] = tensor
    if tied and "token_embeddings.weight" in out:
        out["lm_head.weight"] = out["token_embeddings.weight"]
    return out
