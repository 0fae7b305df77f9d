"""T5 relative bias (Raffel et al. 2020), causal form: one learned scalar per (bucket, head).

Distances n = max(i - j, 0) below num_buckets/2 get a bucket each; larger ones share
log-spaced buckets up to max_distance, and every distance beyond it falls into the last bucket
— the bias saturates, so it is defined (constant) at any length. One table serves all layers,
so the bias depends on positions only: a ``distance_bias``, computed once per forward.

Scale: the original T5 drops the 1/sqrt(d) on q·k. Here q·k keeps the standard softmax scale
(as every other encoding does, so runs differ only in the encoding) and the bias is added in
logit units, i.e. after the scaling.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Annotated, Any

import torch
from torch import Tensor, nn

from posenc_cli.common.errors import PosencError
from posenc_cli.common.rules import Rule
from posenc_cli.encodings.base import PositionalEncoding


def t5_bucket(distance: Tensor, num_buckets: int = 32, max_distance: int = 128) -> Tensor:
    """Bucket id of each causal distance i - j (negative distances count as 0), as int64."""
    n = distance.clamp(min=0)
    max_exact = num_buckets // 2
    ratio = n.double().clamp(min=max_exact) / max_exact
    log_part = (
        max_exact
        + (ratio.log() / math.log(max_distance / max_exact) * (num_buckets - max_exact)).long()
    )
    log_part = log_part.clamp(max=num_buckets - 1)
    return torch.where(n < max_exact, n, log_part).long()


class T5RelativeBias(PositionalEncoding):
    """A (num_buckets, n_heads) table of learned biases shared by every layer."""

    relative = True

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        head_dim: int,
        n_layers: int,
        num_buckets: Annotated[int, Rule(lo=2)],
        max_distance: int,
    ) -> None:
        super().__init__(d_model, n_heads, head_dim, n_layers)
        self.num_buckets = num_buckets
        self.max_distance = max_distance
        self.weight = nn.Parameter(torch.empty(num_buckets, n_heads))
        std = d_model**-0.5
        nn.init.trunc_normal_(self.weight, std=std, a=-3 * std, b=3 * std)

    @classmethod
    def check_relations(cls, params: Mapping[str, Any]) -> None:
        """The log-spaced buckets start at distance num_buckets / 2 and end at max_distance."""
        half = params["num_buckets"] / 2
        if params["max_distance"] <= half:
            raise PosencError(
                f"encoding.max_distance={params['max_distance']} is not an integer > "
                f"num_buckets / 2 ({half:g}), where the log-spaced buckets start",
                f"set encoding.max_distance above {half:g} (configs/encoding/t5.yaml has its "
                "default)",
            )

    def distance_bias(self, distance: Tensor) -> Tensor:
        """(H, N): the table row of each distance's bucket — one lookup per distinct distance
        instead of one per (i, j) pair."""
        ids = t5_bucket(distance, self.num_buckets, self.max_distance)
        return self.weight.t()[:, ids].float()

    def extra_repr(self) -> str:
        return (
            f"{super().extra_repr()}, num_buckets={self.num_buckets}, "
            f"max_distance={self.max_distance}"
        )
