"""A non-editable install of the wheel into a fresh virtual environment works from another
folder: the wheel must ship configs/ (tests check both ways: here the installed copy, elsewhere
the checkout's).

The environment does not see the system's site-packages: a .pth file puts this interpreter's
site-packages (torch, hydra, … already installed) after the environment's own, so the test
needs no network and no dependency outside the interpreter running it, and the wheel's copy of
posenc_cli comes first.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

from tests.helpers.configs import TINY

pytestmark = pytest.mark.slow


def _build_wheel(repo: Path, out: Path) -> Path:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(out),
            str(repo),
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return next(out.glob("posenc-*.whl"))


def _fresh_env(env_dir: Path) -> Path:
    """A venv without system site-packages whose path ends with this interpreter's
    site-packages; its python."""
    venv.create(env_dir, system_site_packages=False, with_pip=False)
    py = env_dir / "bin" / "python"
    site = subprocess.run(
        [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    ours = dict.fromkeys(sysconfig.get_paths()[k] for k in ("purelib", "platlib"))
    (Path(site) / "_posenc_test_deps.pth").write_text("".join(f"{p}\n" for p in ours))
    return py


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory, repo: Path) -> Path:
    return _build_wheel(repo, tmp_path_factory.mktemp("wheel"))


def test_wheel_ships_every_config(wheel: Path, repo: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    for cfg in (repo / "configs").rglob("*.yaml"):
        assert f"posenc_cli/configs/{cfg.relative_to(repo / 'configs').as_posix()}" in names


def test_installed_wheel_trains_from_another_directory(
    wheel: Path, tmp_path: Path, corpus: Path, cache_dir: Path
) -> None:
    env_dir = tmp_path / "venv"
    py = _fresh_env(env_dir)
    # --ignore-installed: the editable posenc seen through the .pth file is neither replaced
    # nor uninstalled; the wheel goes into the new environment only.
    subprocess.run(
        [
            str(py),
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--no-index",
            "--ignore-installed",
            str(wheel),
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {**os.environ, "POSENC_CACHE": str(cache_dir), "PYTHONPATH": ""}
    where = subprocess.run(
        [
            str(py),
            "-c",
            "import posenc_cli, posenc_cli.config.groups as c;"
            "print(posenc_cli.__file__); print(c.config_dir())",
        ],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    module_file, cfg_dir = where.stdout.split()
    assert str(env_dir) in module_file and str(env_dir) in cfg_dir
    res = subprocess.run(
        [
            str(env_dir / "bin" / "posenc"),
            "train",
            *TINY,
            "train.steps=3",
            "eval.at_end=false",
            "data=text",
            f"data.path={corpus}",
            "hydra.run.dir=run",
        ],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr
    assert (elsewhere / "run" / "metrics.json").is_file()
