"""Positional encodings. Each one is a file here plus a YAML in configs/encoding/."""

from posenc_cli.encodings.base import BiasSite, ForwardCache, PositionalEncoding, Span
from posenc_cli.encodings.registry import build_encoding

__all__ = ["BiasSite", "ForwardCache", "PositionalEncoding", "Span", "build_encoding"]
