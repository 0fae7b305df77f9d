"""data=hf against a hub that accepts connections and never answers: one line within the
deadline (POSENC_HUB_TIMEOUT), exit 2, nothing created — not minutes of silent retries. The
"hub" is a socket on 127.0.0.1 that accepts and stays silent."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.cli import run_cli

pytestmark = pytest.mark.slow
pytest.importorskip("datasets")


@pytest.fixture
def silent_hub() -> Iterator[str]:
    """http://127.0.0.1:PORT of a server that accepts every connection and never answers."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    server.settimeout(0.2)
    held: list[socket.socket] = []
    done = threading.Event()

    def accept() -> None:
        while not done.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}"
    done.set()
    thread.join(timeout=5)
    for conn in held:
        conn.close()
    server.close()


def test_a_hub_that_never_answers_is_one_line_within_the_deadline(
    silent_hub: str, tmp_path: Path
) -> None:
    env = {"HF_ENDPOINT": silent_hub, "HF_HOME": str(tmp_path / "hf"), "POSENC_HUB_TIMEOUT": "3"}
    started = time.monotonic()
    res = run_cli(
        ["train", "data=hf", "data.dataset=someone/corpus", "hydra.run.dir=run"],
        tmp_path,
        tmp_path / "cache",
        timeout=120,
        env=env,
    )
    assert time.monotonic() - started < 60
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and len(lines) == 1, res.stderr
    assert "the hub gave no answer within 3 s" in lines[0] and "POSENC_HUB_TIMEOUT" in lines[0]
    assert not (tmp_path / "run").exists()
