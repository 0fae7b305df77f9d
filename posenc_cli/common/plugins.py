"""Plug-ins found without a list: every module of a package imported, every subclass found.

Evaluation tasks (evals/tasks/), synthetic tasks (synthetic/tasks/) and inspect figures are
each one file defining one subclass; adding one touches no registry.
"""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType
from typing import TypeVar

T = TypeVar("T")


def import_all(package: ModuleType) -> None:
    """Import every module of ``package`` (so its classes exist)."""
    for info in pkgutil.iter_modules(package.__path__):
        importlib.import_module(f"{package.__name__}.{info.name}")


def subclasses(cls: type[T]) -> list[type[T]]:
    """Every subclass of ``cls``, at any depth, in definition order."""
    out: list[type[T]] = []
    for sub in cls.__subclasses__():
        out += [sub, *subclasses(sub)]
    return out
