"""Every default has one value: the YAMLs in configs/ and the typed schema (which completes an
old run directory's missing keys, config/rundir.py) agree on every key they both hold."""

from __future__ import annotations

from typing import Any

import pytest
from omegaconf import OmegaConf

from posenc_cli.config.compose import compose
from posenc_cli.config.schema import RootConfig


def leaves(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            out |= leaves(value, f"{prefix}{key}.")
        else:
            out[f"{prefix}{key}"] = value
    return out


def test_the_yamls_and_the_schema_give_every_key_the_same_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("POSENC_CACHE", raising=False)  # data.cache_dir's YAML value reads it
    schema = leaves(OmegaConf.to_container(OmegaConf.structured(RootConfig), resolve=True))
    # the bench section is composed only for `posenc bench`, which adds it this way
    composed = leaves(OmegaConf.to_container(compose(["+bench=default"]), resolve=True))
    missing = sorted(k for k in schema if k not in composed)
    assert not missing, f"schema keys without a YAML value: {missing}"
    differ = {k: (v, composed[k]) for k, v in schema.items() if v != "???" and composed[k] != v}
    assert not differ, f"(schema, YAML) defaults that disagree: {differ}"
    assert len(schema) > 50  # the walk reached the sections, not only the top level
