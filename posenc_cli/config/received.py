"""A run directory's saved config read as data: nothing in it is resolved from the reader's
environment.

Hydra saves a run's config as composed, with its interpolations unresolved, so the configs
posenc writes hold a few of its own: the older flat eval keys (``${.extrapolation.factors}``),
CoPE's ``${posenc.add:${train.context_length},1}`` and the data cache's ``${oc.env:…}``. A
received file could hold any other, and OmegaConf would resolve it on first access —
``${oc.env:SECRET}`` in data.name would put the reader's secret into metrics.json and a cache
folder name. So a saved config is resolved here, once, against itself alone:

* a node interpolation (``${a.b}``, ``${.a.b}``) reads another key of the same file, and
  posenc's own pure resolver ``posenc.add`` adds such keys and integers: both are resolved;
* every other ``${…}`` (any other resolver, a string with an interpolation inside, an escaped
  ``\\${``) is refused with a one-line error naming the key. Refused rather than read
  literally: a literal ``${oc.env:X}`` would become a data name or cache folder name that
  nobody meant, silently, while the error tells the user which key of which file to fix;
* data.cache_dir is dropped unread (the reader's own cache is used, see config/rundir.py).

What comes out holds plain values only, so no later access can resolve anything. Before any
of that, the file is read as untrusted bytes (``load_received``): a regular file of bounded
size whose YAML uses at most a few aliases, so a nested-alias "billion laughs" document is
refused in one line instead of expanding in memory.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any, cast

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from posenc_cli.common.errors import PosencError
from posenc_cli.common.regular_file import read_regular_text

_NODE = r"\$\{\.*[A-Za-z_]\w*(?:\.\w+)*\}"
_ARG = rf"(?:{_NODE}|-?\d+)"
ALLOWED = re.compile(rf"{_NODE}|\$\{{posenc\.add:{_ARG}(?:,{_ARG})*\}}")
DROPPED = (("data", "cache_dir"),)
#: A saved config is a few kilobytes and posenc writes no YAML alias.
MAX_BYTES = 1 << 20
MAX_ALIASES = 16


def load_received(path: Path) -> Any:
    """The YAML file at ``path`` as OmegaConf data, after checking it is a regular file of at
    most MAX_BYTES whose YAML holds at most MAX_ALIASES aliases; ValueError says why not (the
    callers turn any failure into their own one line)."""
    return OmegaConf.create(_checked_text(path))


def received_data(path: Path) -> Any:
    """The same file, checked the same way, as plain data (dicts, lists, scalars, with
    OmegaConf's reading of numbers such as 1e-3) and no OmegaConf node: a comparison reads
    hundreds of saved configs, and building nodes took 18 times as long as parsing."""
    return yaml.load(_checked_text(path), Loader=_PlainLoader)


def _checked_text(path: Path) -> str:
    text = read_regular_text(path, MAX_BYTES)
    # an alias names an anchor (&): without one there is nothing to expand, and no need to
    # tokenize the file twice
    aliases = "&" in text and sum(isinstance(t, yaml.AliasToken) for t in yaml.scan(text))
    if aliases > MAX_ALIASES:
        raise ValueError(f"{aliases} YAML aliases, more than posenc reads")
    return text


def _plain_loader() -> Any:
    """YAML's safe loader (libyaml's where installed) reading scalars as OmegaConf does: an
    exponent without a dot is a float (1e-3), and there are no timestamps."""
    loader: Any = type("PlainLoader", (getattr(yaml, "CSafeLoader", yaml.SafeLoader),), {})
    loader.add_implicit_resolver(
        "tag:yaml.org,2002:float",
        re.compile(
            r"^(?:[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)?"
            r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
        ),
        list("-+0123456789."),
    )
    loader.yaml_implicit_resolvers = {
        first: [(tag, regex) for tag, regex in resolvers if not tag.endswith(":timestamp")]
        for first, resolvers in loader.yaml_implicit_resolvers.items()
    }
    return loader


_PlainLoader = _plain_loader()


def resolve_received(cfg: DictConfig, source: Path) -> DictConfig:
    """``cfg`` (loaded from ``source``) with posenc's own interpolations resolved inside it
    and no other; see the module docstring."""
    plain = OmegaConf.to_container(cfg, resolve=False)
    assert isinstance(plain, dict)
    for section, key in DROPPED:
        if isinstance(plain.get(section), dict):
            plain[section].pop(key, None)
    for where, value in _strings(plain, ""):
        if "${" in value and not ALLOWED.fullmatch(value):
            raise PosencError(
                f"'{source}' sets {where} to {value[:60]!r}, an interpolation posenc does not "
                "resolve in a received run",
                f"write the value itself into {where}",
            )
    try:
        resolved = cast(
            dict[str, Any], OmegaConf.to_container(OmegaConf.create(plain), resolve=True)
        )
    except OmegaConfBaseException as exc:
        key = getattr(exc, "full_key", None) or "a key"
        raise PosencError(
            f"'{source}': {key} cannot be resolved within the file ({type(exc).__name__})",
            f"write the value itself into {key}",
        ) from None
    return OmegaConf.create(resolved)


def _strings(node: Any, where: str) -> list[tuple[str, str]]:
    """(dotted key, value) of every string in a plain container."""
    items: Iterable[tuple[Any, Any]]
    if isinstance(node, dict):
        items = node.items()
    elif isinstance(node, list):
        items = enumerate(node)
    else:
        return [(where, node)] if isinstance(node, str) else []
    return [
        found
        for key, value in items
        for found in _strings(value, f"{where}.{key}" if where else str(key))
    ]
