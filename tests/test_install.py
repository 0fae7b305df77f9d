"""A non-editable `pip install .` into a fresh virtual environment works from another folder:
the wheel must ship configs/ (tests check both ways: here the installed copy, elsewhere the
checkout's)."""

from __future__ import annotations

import os
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

from conftest import REPO, TINY


def _build_wheel(out: Path) -> Path:
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "-w", str(out), str(REPO)], check=True, capture_output=True, text=True,
                   timeout=300)
    return next(out.glob("posenc-*.whl"))


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _build_wheel(tmp_path_factory.mktemp("wheel"))


def test_wheel_ships_every_config(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    for cfg in (REPO / "configs").rglob("*.yaml"):
        assert f"posenc_cli/configs/{cfg.relative_to(REPO / 'configs').as_posix()}" in names


def test_installed_wheel_trains_from_another_directory(wheel: Path, tmp_path: Path,
                                                       corpus: Path, cache_dir: Path) -> None:
    env_dir = tmp_path / "venv"
    venv.create(env_dir, system_site_packages=True, with_pip=False)
    py = env_dir / "bin" / "python"
    subprocess.run([str(py), "-m", "pip", "install", "--no-deps", "--no-index", str(wheel)],
                   check=True, capture_output=True, text=True, timeout=300)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {**os.environ, "POSENC_CACHE": str(cache_dir), "PYTHONPATH": ""}
    where = subprocess.run([str(py), "-c", "import posenc_cli, posenc_cli.config as c;"
                            "print(posenc_cli.__file__); print(c.config_dir())"],
                           cwd=elsewhere, env=env, capture_output=True, text=True, check=True)
    module_file, cfg_dir = where.stdout.split()
    assert str(env_dir) in module_file and str(env_dir) in cfg_dir
    res = subprocess.run([str(env_dir / "bin" / "posenc"), "train", *TINY, "train.steps=3",
                          "eval.at_end=false", "data=text", f"data.path={corpus}",
                          "hydra.run.dir=run"], cwd=elsewhere, env=env, capture_output=True,
                         text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert (elsewhere / "run" / "metrics.json").is_file()
