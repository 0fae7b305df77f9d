"""Run directories: choosing a fresh one, claiming it for one process, loading a saved one.

A run directory is claimed by creating it exclusively and holding an advisory lock on its
``.posenc.lock`` for the life of the process, so two commands started in the same second never
share one, and `posenc resume` of a run that is still training is refused. The lock goes away
with the process, however it ends.

A run directory may come from someone else: its saved config chooses neither which class is
built (the encoding is mapped by name through posenc's own configs/encoding/) nor where the
data cache lives (the user's $POSENC_CACHE, as for a new run), and its interpolations are
resolved against the file alone (config/received.py).
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import IO, Any, cast

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from posenc_cli.common.atomic import write_text_atomic
from posenc_cli.common.errors import PosencError
from posenc_cli.common.rules import NAME_PATTERN
from posenc_cli.common.run_layout import LOCK_FILE, RunDir
from posenc_cli.config.defaults import new_run_values, plain_value, raw_values
from posenc_cli.config.errors import resolution_error
from posenc_cli.config.eval_sections import fold_older_names
from posenc_cli.config.groups import config_dir, group_options, option_file
from posenc_cli.config.layer_encodings import fill_layer_encodings
from posenc_cli.config.overrides import given
from posenc_cli.config.received import load_received, resolve_received
from posenc_cli.config.schema import COMMAND_SECTIONS
from posenc_cli.config.task_checks import prepare_task
from posenc_cli.encodings.names import META_KEYS

_held: list[tuple[str, IO[str]]] = []


def run_dir_of(cfg: DictConfig, key: str = "hydra.run.dir") -> Path:
    """hydra.run.dir (or another path key) resolved, as one line when it cannot be."""
    try:
        value = str(OmegaConf.select(cfg, key, throw_on_missing=True) or "").strip()
    except OmegaConfBaseException as exc:
        raise resolution_error(exc, key) from None
    if not value:
        raise PosencError(f"{key} is empty", f"give a folder, e.g. {key}=outputs/my-run")
    return Path(value)


def planned_run_dir(cfg: DictConfig, overrides: list[str]) -> Path:
    """The run directory a command will claim, checked but not created."""
    run_dir = run_dir_of(cfg)
    check_writable(run_dir)
    if (
        given(overrides, "hydra.run.dir")
        and run_dir.exists()
        and (not run_dir.is_dir() or any(run_dir.iterdir()))
    ):
        raise PosencError(
            f"run directory '{run_dir}' already exists",
            "choose a new hydra.run.dir, or resume it with `posenc resume DIR`",
        )
    return run_dir


def claim_new_run_dir(cfg: DictConfig, overrides: list[str]) -> Path:
    """Create and lock the run directory: hydra.run.dir if given (it must not exist yet, or be
    empty), else the default with -1, -2, … appended until one can be created."""
    run_dir = planned_run_dir(cfg, overrides)
    if given(overrides, "hydra.run.dir"):
        make_dirs(run_dir)
        lock_run_dir(run_dir)
        if any(p.name != LOCK_FILE for p in run_dir.iterdir()):
            raise PosencError(
                f"run directory '{run_dir}' was just taken by another command",
                "choose a new hydra.run.dir",
            )
        return run_dir
    return create_exclusive(run_dir, lock=True)


def make_dirs(path: Path, exist_ok: bool = True) -> None:
    """mkdir -p, a failure (a read-only or virtual file system) as one line."""
    try:
        path.mkdir(parents=True, exist_ok=exist_ok)
    except FileExistsError:
        raise
    except OSError as exc:
        raise PosencError(
            f"cannot create '{path}': {exc.strerror or exc}",
            "choose a writable place (hydra.run.dir=DIR or another folder)",
        ) from None


def create_exclusive(path: Path, lock: bool = False) -> Path:
    """``path``, or ``path-1``, ``path-2``, …: the first that this process could create."""
    make_dirs(path.parent)
    candidate = path
    n = 1
    while True:
        try:
            make_dirs(candidate, exist_ok=False)
            break
        except FileExistsError:
            candidate = path.with_name(f"{path.name}-{n}")
            n += 1
    if lock:
        lock_run_dir(candidate)
    return candidate


def lock_run_dir(run_dir: Path) -> None:
    """Hold an exclusive lock on the run directory until this process ends. A received run
    could hold links that point anywhere, so a run with a link where posenc writes is
    refused, and the lock file itself is never followed."""
    refuse_links(run_dir)
    try:
        fd = os.open(RunDir(run_dir).lock_file, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    except OSError as exc:
        raise PosencError(
            f"cannot lock the run directory '{run_dir}' "
            f"({exc.strerror or exc}; a link or an unwritable folder?)",
            f"remove {RunDir(run_dir).lock_file} if it is a link, or fix permissions",
        ) from None
    fh = os.fdopen(fd, "r+", encoding="utf-8")
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        fh.close()
        raise _in_use(run_dir) from None
    fh.seek(0)
    fh.truncate()
    fh.write(str(os.getpid()))
    fh.flush()
    _held.append((os.path.abspath(RunDir(run_dir).lock_file), fh))


def _in_use(run_dir: Path) -> PosencError:
    return PosencError(
        f"run directory '{run_dir}' is in use by another posenc process",
        "wait for it to finish (or stop it), then try again",
    )


def refuse_in_use(run_dir: Path) -> None:
    """``lock_run_dir``'s refusal of a run another process holds, creating nothing (a command
    that may still refuse its inputs takes the lock only once they are read)."""
    if run_in_use(run_dir):
        raise _in_use(run_dir)


def run_in_use(run_dir: Path) -> bool:
    """Whether another process holds the run's lock now (this process's own lock, held since it
    trained the run, does not count); creates and writes nothing, so it also answers for a run
    this user may only read."""
    if os.path.abspath(RunDir(run_dir).lock_file) in {held for held, _ in _held}:
        return False
    try:
        fd = os.open(RunDir(run_dir).lock_file, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return False  # no lock file: no posenc process ever held it
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)  # also releases the shared lock just taken
    return False


def unlock_run_dir(run_dir: Path) -> None:
    """Release this process's lock on ``run_dir`` (a sweep worker runs many jobs: a finished
    job's run must be free for `posenc eval` while the sweep goes on)."""
    target = os.path.abspath(RunDir(run_dir).lock_file)
    for held in [h for h in _held if h[0] == target]:
        _held.remove(held)
        held[1].close()


def refuse_links(run_dir: Path) -> None:
    """No symbolic link among the run directory's entries and those of the folders posenc
    writes into (checkpoints/, eval/ and its keys, inspect/); the run directory itself may
    be one."""
    places = [
        *run_dir.glob("*"),
        *run_dir.glob(".*"),
        *run_dir.glob("checkpoints/*"),
        *run_dir.glob("eval/*"),
        *run_dir.glob("eval/*/*"),
        *run_dir.glob("inspect/*"),
        *run_dir.glob("inspect/.*"),
    ]
    link = next((p for p in places if p.is_symlink()), None)
    if link is not None:
        raise PosencError(
            f"'{link}' is a symbolic link; posenc does not write through links in a run directory",
            "remove the link (or copy the run without links)",
        )


def check_writable(run_dir: Path) -> None:
    """Fail before anything is created when the run directory cannot be created."""
    parent = run_dir.absolute()
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise PosencError(
            f"cannot create the run directory '{run_dir}': '{parent}' is a file",
            "choose another place with hydra.run.dir=DIR",
        )
    if not os.access(parent, os.W_OK):
        raise PosencError(
            f"cannot create the run directory '{run_dir}': '{parent}' is not writable",
            "choose a writable place with hydra.run.dir=DIR",
        )


def load_run_config(run_dir: Path) -> DictConfig:
    """The run's saved config with its encoding rebuilt from posenc's own YAML and the data
    cache in the user's place (see the module docstring)."""
    saved = RunDir(run_dir).config_file
    if not saved.is_file():
        raise PosencError(
            f"'{run_dir}' is not a posenc run directory (no .hydra/config.yaml)",
            "pass the directory a `posenc train` run created",
        )
    try:
        cfg = load_received(saved)
    except Exception as exc:  # a damaged or hostile YAML file: parse errors of many kinds
        why = str(exc) if isinstance(exc, ValueError) else type(exc).__name__
        raise PosencError(
            f"'{saved}' cannot be read ({why[:80]})", "restore the run's .hydra/config.yaml"
        ) from None
    cfg = resolve_received(cfg, saved) if isinstance(cfg, DictConfig) else None
    if (
        cfg is None
        or not isinstance(cfg.get("encoding"), DictConfig)
        or not isinstance(cfg.get("data"), DictConfig)
    ):
        raise PosencError(f"'{saved}' is not a posenc config", "restore it from the run's owner")
    cfg = cast(DictConfig, OmegaConf.merge(new_run_values(), cfg))  # keys added since it ran
    # older runs saved the bench section too: a run's config holds none, old or new
    kept: list[Any] = [k for k in cfg if k not in COMMAND_SECTIONS]  # a received key: any type
    cfg = OmegaConf.masked_copy(cfg, kept)
    fold_older_names(cfg.eval)
    cfg.encoding = trusted_encoding(cfg.encoding)
    fill_layer_encodings(cfg)  # the named encodings' parameters, plain values only
    sotu = cast(DictConfig, OmegaConf.load(config_dir() / "data" / "sotu.yaml"))
    cfg.data.cache_dir = raw_values(sotu)["cache_dir"]
    cfg.resume = None
    prepare_task(cfg)  # older task runs saved the default length, not the one they trained at
    return cfg


def save_run_config(run_dir: Path, cfg: DictConfig, overrides: list[str]) -> None:
    """The one writer of a run's .hydra/config.yaml and overrides.yaml, for runs trained,
    swept, extended and imported alike: the config exactly as it runs (interpolations as
    written, Hydra's own section left out) and the overrides that made it."""
    layout = RunDir(run_dir)
    kept: list[Any] = [k for k in cfg if k != "hydra"]  # a received key: any type
    plain = OmegaConf.masked_copy(cfg, kept)
    write_text_atomic(layout.config_file, OmegaConf.to_yaml(plain))
    write_text_atomic(layout.overrides_file, OmegaConf.to_yaml(OmegaConf.create(list(overrides))))


def trusted_encoding(saved: DictConfig) -> DictConfig:
    """configs/encoding/<name>.yaml with the saved parameter values (plain values, or lists
    of them: hybrid's pattern)."""
    name = str(saved.get("name", ""))
    if not NAME_PATTERN.fullmatch(name) or name not in group_options("encoding"):
        raise PosencError(
            f"the run's encoding '{name}' is not one of posenc's encodings",
            f"posenc knows: {', '.join(group_options('encoding'))}",
        )
    trusted = cast(DictConfig, OmegaConf.load(option_file("encoding", name)))  # a mapping
    for key, value in raw_values(saved).items():
        if key in META_KEYS:
            continue
        if key not in trusted or not plain_value(value):
            raise PosencError(
                f"the run's config gives encoding '{name}' an unknown or "
                f"non-plain parameter '{key}'",
                "restore the run's config",
            )
        trusted[key] = value
    return trusted
