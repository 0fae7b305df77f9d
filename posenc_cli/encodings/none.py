"""NoPE: no positional information. A causal mask still lets a decoder infer position."""

from posenc_cli.encodings.base import PositionalEncoding


class NoEncoding(PositionalEncoding):
    """Attention sees content only; kept as the baseline every other encoding is compared to."""

    relative = True
