"""The overrides an import takes: only the settings it reads, so that nothing it saves unread
(train.threads, train.nproc, …) can later keep `posenc eval`, which may not change them, from
evaluating the run."""

from __future__ import annotations

from posenc_cli.common.errors import PosencError
from posenc_cli.config.overrides import key_of

#: What every import takes: the evaluation's settings (eval=NAME and data=NAME included), the
#: seed and where the run goes.
EVALUATION = ("eval.*", "data.*", "seed", "hydra.run.dir")
#: The groups of EVALUATION, each key under them taken.
GROUPS = ("eval", "data")


def check_import_overrides(
    overrides: list[str], command: str, own: tuple[str, ...], fixed: str
) -> None:
    """Refuse every key but ``own`` (what the import itself needs) and EVALUATION; ``fixed``
    says what fixes the model of the import (its config.json, its weights)."""
    for key in map(key_of, overrides):
        group = key.split(".")[0]
        if key in (*own, *EVALUATION) or group in GROUPS:
            continue
        model = group in ("model", "encoding")
        why = f"{fixed} fixes the model" if model else "an imported run is evaluated, never trained"
        raise PosencError(
            f"posenc {command} does not take '{key}' ({why})",
            f"set only {', '.join((*own, *EVALUATION))}",
        )
