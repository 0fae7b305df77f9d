"""The properties the tests assert, measured numerically on the user's own model.

Each row is a relative error (0 means the property holds exactly; float32 rounding leaves
about 1e-7 to 1e-6); ``HOLDS`` is the bound under which the table says it holds:

* permutation equivariance of attention with no encoding and no mask (the derivations'
  starting point: without positions, attention cannot tell order), on the model's first layer;
* shift invariance: the logits do not change when every position moves by the training length
  (the ``relative`` claim of an encoding);
* causality: changing the tokens after position t leaves every logit up to t unchanged;
* for rotary encodings: ‖R_m x‖ = ‖x‖, and ⟨R_m q, R_n k⟩ = ⟨q, R_{n-m} k⟩.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from posenc_cli.encodings.rope import RotaryEncoding
from posenc_cli.model.probe import heads
from posenc_cli.model.transformer import TransformerLM

#: Relative error under which a property is reported as holding (float32 arithmetic).
HOLDS = 1e-4


@dataclass(frozen=True)
class Property:
    name: str
    error: float | None  # None: does not apply
    expected: bool | None  # what the encoding claims (None: nothing claimed)
    note: str = ""

    @property
    def holds(self) -> bool | None:
        return None if self.error is None else self.error < HOLDS


def _rel(a: Tensor, b: Tensor) -> float:
    return float((a - b).abs().max() / b.abs().max().clamp(min=1e-30))


def permutation_error(model: TransformerLM, x_BTD: Tensor) -> float:
    """|f(Px) - P f(x)| / |f(x)| for the first layer's attention without encoding or mask."""
    attn = model.blocks[0].attn
    perm = torch.randperm(x_BTD.shape[1], generator=torch.Generator().manual_seed(0))

    def f(x: Tensor) -> Tensor:
        q, k, v = heads(attn, x)
        p = torch.softmax(q @ k.transpose(-1, -2) * attn.head_dim**-0.5, dim=-1)
        return p @ v

    return _rel(f(x_BTD[:, perm]), f(x_BTD)[:, :, perm])


def shift_error(model: TransformerLM, ids_BT: Tensor, shift: int) -> float | None:
    """|logits(positions + shift) - logits(positions)| / |logits|; None if out of range."""
    enc = model.encoding
    if enc.max_len is not None and ids_BT.shape[1] + shift > enc.max_len:
        return None
    return _rel(model(ids_BT, pos_offset=shift), model(ids_BT))


def causality_error(model: TransformerLM, ids_BT: Tensor, vocab: int) -> float:
    """|Δ logits[:, :t]| / |logits| after replacing every token from t = T/2 on."""
    t = ids_BT.shape[1] // 2
    changed = ids_BT.clone()
    changed[:, t:] = (changed[:, t:] + 1) % vocab
    return _rel(model(changed)[:, :t], model(ids_BT)[:, :t])


def rotation_errors(enc: RotaryEncoding, longest: int) -> tuple[float, float]:
    """(‖R_m x‖ vs ‖x‖, ⟨R_m q, R_n k⟩ vs ⟨q, R_{n-m} k⟩) for random q, k at random ranges
    of positions up to ``longest``, on the encoding's rotation alone (its ``rotate``, less
    YaRN's attention factor on q and k of a run `posenc extend` fine-tuned with it)."""
    gen = torch.Generator().manual_seed(0)
    E = enc.head_dim
    t = min(64, longest)
    scale_qk = enc.attention_factor
    norm = relative = 0.0
    for _ in range(8):
        q = torch.randn(1, 1, t, E, generator=gen)
        k = torch.randn(1, 1, t, E, generator=gen)
        a, b = (int(x) for x in torch.randint(0, longest - t + 1, (2,), generator=gen))
        m = torch.arange(a, a + t)
        n = torch.arange(b, b + t)
        rq = enc.rotate(q, m) / scale_qk
        norm = max(norm, _rel(rq.norm(dim=-1), q.norm(dim=-1)))
        lhs = (rq * enc.rotate(k, n) / scale_qk).sum(-1)
        rhs = (q * enc.rotate(k, n - m) / scale_qk).sum(-1)  # one distance b - a for every row
        scale = (q.norm(dim=-1) * k.norm(dim=-1)).max()
        relative = max(relative, float((lhs - rhs).abs().max() / scale))
    return norm, relative


def claims_relative(model: TransformerLM) -> bool:
    """Every encoding a layer uses claims relativity (a NoPE layer has no positions to shift;
    one layer of FIRE beside RoPE is not shift-invariant)."""
    kinds = set(model.layer_kinds) - {"none"}
    return all(model.layer_encoding(kind).relative for kind in kinds)


def property_table(
    model: TransformerLM, ids_BT: Tensor, train_length: int, longest: int
) -> list[Property]:
    """Every row that applies to ``model`` (eval mode, no gradient)."""
    enc = model.encoding
    with torch.no_grad():
        x = model.token_embeddings(ids_BT).float()
        shift = shift_error(model, ids_BT, train_length)
        rows = [
            Property(
                "permutation equivariance (no encoding, no mask)",
                permutation_error(model, x),
                True,
                "layer 1's own weights",
            ),
            Property(
                f"shift invariance (positions + {train_length})",
                shift,
                claims_relative(model),
                "" if shift is not None else f"positions past encoding.max_len={enc.max_len}",
            ),
            Property(
                "causality (later tokens changed)",
                causality_error(model, ids_BT, model.vocab_size),
                True,
            ),
        ]
        if isinstance(enc, RotaryEncoding):
            norm, relative = rotation_errors(enc, longest)
            rows += [
                Property("RoPE: ‖R_m x‖ = ‖x‖", norm, True, "the rotation alone"),
                Property(
                    "RoPE: ⟨R_m q, R_n k⟩ = ⟨q, R_{n-m} k⟩", relative, True, "the rotation alone"
                ),
            ]
    return rows
