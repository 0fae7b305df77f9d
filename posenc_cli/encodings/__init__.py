"""Positional encodings. Each one is a file here plus a YAML in configs/encoding/.

The names below are loaded on first use (PEP 562) rather than here: importing this package
must not import torch, so that the torch-free `names.py` serves `posenc --help` at once.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from posenc_cli.encodings.base import PositionalEncoding
    from posenc_cli.encodings.registry import build_encoding
    from posenc_cli.encodings.site import BiasSite, ForwardCache
    from posenc_cli.encodings.span import Span

__all__ = ["BiasSite", "ForwardCache", "PositionalEncoding", "Span", "build_encoding"]
_HOME = {"BiasSite": "site", "ForwardCache": "site", "PositionalEncoding": "base"} | {
    "build_encoding": "registry",
    "Span": "span",
}


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_HOME[name]}"), name)
