"""Where an imported model's files are: a local folder, or a hub id in the local cache.

A hub id is resolved through the Hugging Face cache only, so an import never reaches the
network unless the user allows it (``allow_download``); then only the files an import reads are
fetched (config, safetensors, tokenizer), never a pickle.
"""

from __future__ import annotations

from pathlib import Path

from posenc_cli.common.errors import PosencError

#: The files an import reads.
PATTERNS = ["config.json", "*.safetensors", "model.safetensors.index.json", "tokenizer*.json"]


def model_folder(name: str, allow_download: bool, revision: str | None = None) -> Path:
    """The folder holding ``name``'s files: ``name`` itself when it is a folder."""
    local = Path(name).expanduser()
    if local.is_dir():
        _check_local(name, allow_download, revision)
        return local
    if local.exists() or name.count("/") != 1 or name.startswith((".", "/", "~")):
        raise PosencError(
            f"'{name}' is neither a model folder nor a hub id",
            "give a folder with config.json, or a hub id such as HuggingFaceTB/SmolLM2-135M",
        )
    try:  # deferred: huggingface_hub is the optional [hf] extra
        from huggingface_hub import snapshot_download
        from huggingface_hub.errors import HfHubHTTPError
    except ImportError:
        raise PosencError(
            "a hub id needs the huggingface_hub package",
            'install the extra: pip install -e ".[hf]"',
        ) from None
    try:
        path = snapshot_download(
            name, revision=revision, local_files_only=not allow_download, allow_patterns=PATTERNS
        )
    except (HfHubHTTPError, OSError, ValueError) as exc:
        where, fix = (
            ("from the hub", "check the id and the connection, or give a local folder")
            if allow_download
            else (
                "in the local cache",
                "allow the download with --allow-download, or give a folder",
            )
        )
        raise PosencError(
            f"hub model '{name}' is not available {where} ({type(exc).__name__})", fix
        ) from None
    return Path(str(path))


def _check_local(name: str, allow_download: bool, revision: str | None) -> None:
    """A local folder has no revision and nothing to download: the hub's options given with
    one are refused rather than silently ignored."""
    options = [
        option
        for option, on in (
            ("--revision", revision is not None),
            ("--allow-download", allow_download),
        )
        if on
    ]
    if options:
        named = " and ".join(options)
        raise PosencError(
            f"{named} {'is' if len(options) == 1 else 'are'} for a hub id only, and '{name}' is "
            "a local folder",
            f"leave {named} out, or give a hub id",
        )
