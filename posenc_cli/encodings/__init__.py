"""Positional encodings. Each one is a file here plus a YAML in configs/encoding/."""

from posenc_cli.encodings.base import PositionalEncoding

__all__ = ["PositionalEncoding"]
