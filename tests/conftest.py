"""Shared fixtures: real configs shrunk to tiny sizes, a small generated corpus, a temp cache,
tiny models of every encoding, and the naive reference definitions of attention and of every
encoding's logit bias that the fast paths are checked against.

Test modules never import each other or this file: shared code with no lifecycle (the CLI in a
subprocess, waiting on it, the tiny overrides) is in tests/helpers/, everything else shared is
a fixture here. Parametrising over encodings is done by the ``encodings`` marker (see
``pytest_generate_tests``), so no test keeps a list of them.

Hypothesis runs derandomised and without an example database by default (profile "ci"), so
the suite is deterministic; ``HYPOTHESIS_PROFILE=fuzz python -m pytest tests/unit -k fuzz``
explores fresh random examples.
"""

from __future__ import annotations

import importlib
import importlib.util
import math
import os
import random
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

# One intra-op thread per test process: xdist already runs one worker per core, and a second
# thread in every worker and every CLI subprocess (they inherit this) only oversubscribes the
# cores (a tiny `posenc train` took 1.6x the wall time with two, on a loaded 2-core machine).
os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402 (after the thread setting, which torch reads when imported)

# Without CUDA, Triton kernels (CoPE's fused attention) run on the CPU under Triton's
# interpreter, which Triton chooses when it is first imported: set before anything imports it.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
from hypothesis import settings
from omegaconf import OmegaConf

from posenc_cli.encodings import PositionalEncoding, build_encoding
from posenc_cli.model import TransformerLM

REPO = Path(__file__).resolve().parent.parent
ENCODING_CONFIGS = sorted((REPO / "configs" / "encoding").glob("*.yaml"))
ENCODING_NAMES = [p.stem for p in ENCODING_CONFIGS]

#: The tiny models of the unit tests: vocabulary, width, depth, and the training length.
VOCAB = 50
D_MODEL = 32
N_LAYERS = 2
N_HEADS = 4
TRAIN_LEN = 16
#: The learned table in these tests; 4x the training length must then be refused.
SMALL_MAX_LEN = 2 * TRAIN_LEN

WORDS = (
    "the of and to in a is that for it as was with be by on not he this are or his from "
    "at which but have an they you were her she there been one all we their has would "
    "when if so no will more can what said who may up out them into some"
).split()

torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))

settings.register_profile("ci", derandomize=True, database=None)
settings.register_profile("fuzz", derandomize=False, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


# --- collection -------------------------------------------------------------------------------


def _built(name: str) -> PositionalEncoding:
    """The encoding of configs/encoding/<name>.yaml as the tiny models build it."""
    return build_encoding(_encoding_cfg(name), D_MODEL, N_HEADS, N_LAYERS)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    marker = metafunc.definition.get_closest_marker("encodings")
    if marker is None:
        return
    select = marker.kwargs.get("select", marker.args[0] if marker.args else None)
    names = [n for n in ENCODING_NAMES if select is None or select(_built(n))]
    assert names, "the encodings marker selected no encoding"
    metafunc.parametrize("name", names)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test under tests/e2e/ starts a process and must be skippable with -m 'not slow'."""
    e2e = REPO / "tests" / "e2e"
    unmarked = [
        item.nodeid
        for item in items
        if e2e in item.path.parents and item.get_closest_marker("slow") is None
    ]
    if unmarked:
        raise pytest.UsageError(f"tests/e2e tests without @pytest.mark.slow: {unmarked}")


# --- data and the command line ----------------------------------------------------------------


@pytest.fixture(scope="session")
def repo() -> Path:
    """The checkout's root (configs/, pyproject.toml)."""
    return REPO


def _make_corpus(path: Path, n_docs: int = 40, seed: int = 0) -> Path:
    rng = random.Random(seed)
    docs = []
    for _ in range(n_docs):
        sentences = [
            " ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 14))).capitalize() + "."
            for _ in range(rng.randint(8, 20))
        ]
        docs.append(" ".join(sentences))
    path.write_text("<|endoftext|>".join(docs), encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def make_corpus() -> Callable[..., Path]:
    """make_corpus(path, n_docs=40, seed=0): a deterministic English-like corpus with
    <|endoftext|> between documents, written to ``path``."""
    return _make_corpus


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("posenc-cache")
    os.environ["POSENC_CACHE"] = str(d)
    return d


@pytest.fixture(scope="session")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _make_corpus(tmp_path_factory.mktemp("corpus") / "corpus.txt")


@pytest.fixture
def hf_offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No hub access, and the Hugging Face and posenc caches inside the test's folder."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.setenv("POSENC_CACHE", str(tmp_path / "cache"))


# --- tiny models ------------------------------------------------------------------------------


def _encoding_cfg(name: str) -> Any:
    cfg = OmegaConf.load(ENCODING_CONFIGS[ENCODING_NAMES.index(name)])
    if name == "learned":
        cfg.max_len = SMALL_MAX_LEN
    if name == "cope":  # its YAML derives it from train.context_length
        cfg.max_position = TRAIN_LEN + 1
    return cfg


@pytest.fixture(scope="session")
def encoding_config() -> Callable[[str], Any]:
    """encoding_config(name): configs/encoding/<name>.yaml as the tiny models read it."""
    return _encoding_cfg


@pytest.fixture(scope="session")
def model_sizes() -> dict[str, int]:
    """The sizes make_model and tokens use (the learned table holds small_max_len rows)."""
    return {
        "vocab": VOCAB,
        "d_model": D_MODEL,
        "n_layers": N_LAYERS,
        "n_heads": N_HEADS,
        "train_len": TRAIN_LEN,
        "small_max_len": SMALL_MAX_LEN,
    }


@pytest.fixture(scope="session")
def encoding_names() -> list[str]:
    """Every configs/encoding/*.yaml, by name."""
    return list(ENCODING_NAMES)


@pytest.fixture(scope="session")
def make_model() -> Callable[..., TransformerLM]:
    """make_model(name, n_heads=4, seed=0, d_model=32, **encoding_overrides): a tiny model
    with the named encoding, initialised from ``seed``."""

    def make(
        name: str,
        n_heads: int = N_HEADS,
        seed: int = 0,
        d_model: int = D_MODEL,
        **overrides: object,
    ) -> TransformerLM:
        cfg = _encoding_cfg(name)
        for key, value in overrides.items():
            cfg[key] = value
        torch.manual_seed(seed)
        enc = build_encoding(cfg, d_model, n_heads, N_LAYERS)
        return TransformerLM(VOCAB, d_model, N_LAYERS, n_heads, None, enc)

    return make


@pytest.fixture(scope="session")
def tokens() -> Callable[..., torch.Tensor]:
    """tokens(length, batch=2, seed=1): random ids of the tiny vocabulary."""

    def make(length: int, batch: int = 2, seed: int = 1) -> torch.Tensor:
        return torch.randint(
            0, VOCAB, (batch, length), generator=torch.Generator().manual_seed(seed)
        )

    return make


@pytest.fixture(scope="session")
def randomise_zero_params() -> Callable[[TransformerLM], None]:
    """Give zero-initialised parameters (e.g. Transformer-XL's u, v) values that matter."""

    def randomise(model: TransformerLM) -> None:
        gen = torch.Generator().manual_seed(3)
        with torch.no_grad():
            for p in model.encoding.parameters():
                if not p.any():
                    p.copy_(torch.randn(p.shape, generator=gen) * 0.5)

    return randomise


@pytest.fixture
def model(
    name: str,
    make_model: Callable[..., TransformerLM],
    randomise_zero_params: Callable[[TransformerLM], None],
) -> TransformerLM:
    """The tiny model of the encoding under test (``name``, from the ``encodings`` marker),
    its zero-initialised parameters randomised; a fresh one for every test."""
    built = make_model(name)
    randomise_zero_params(built)
    return built


# --- naive reference definitions --------------------------------------------------------------


def _reference_attention(
    q_BHTE: torch.Tensor,
    k_BHSE: torch.Tensor,
    v_BHSE: torch.Tensor,
    scale: float,
    bias: torch.Tensor | None = None,
    enc: PositionalEncoding | None = None,
) -> torch.Tensor:
    T = q_BHTE.shape[-2]
    S = k_BHSE.shape[-2]
    logits = (q_BHTE @ k_BHSE.transpose(-1, -2)) * scale
    if bias is not None:
        logits = logits + bias
    mask = torch.ones(T, S, dtype=torch.bool, device=q_BHTE.device).triu(S - T + 1)
    logits = logits.masked_fill(mask, -math.inf)
    if enc is not None and enc.has_own_weights:
        module = _reference_module(type(enc).__module__.rpartition(".")[2])
        return module.attention_weights(enc, logits) @ v_BHSE
    return torch.softmax(logits, dim=-1) @ v_BHSE


@pytest.fixture(scope="session")
def reference_attention() -> Callable[..., torch.Tensor]:
    """reference_attention(q, k, v, scale, bias=None, enc=None): plain softmax(q·kᵀ·scale +
    bias + causal)·v for T queries that end with the S keys — the definition the fused path
    must match; for an encoding with its own weights (stick-breaking) the paper's weights
    (tests/reference/NAME.py ``attention_weights``) in place of the softmax."""
    return _reference_attention


def _reference_module(name: str) -> Any:
    """tests/reference/<name>.py, loaded as a submodule of the reference package (which is
    not importable by name: test code never imports other test code)."""
    package = "posenc_reference"
    if package not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            package, REPO / "tests" / "reference" / "__init__.py"
        )
        sys.modules[package] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[package])
    path = REPO / "tests" / "reference" / f"{name}.py"
    assert path.is_file(), (
        f"no naive reference for encoding '{name}': add tests/reference/{name}.py"
    )
    return importlib.import_module(f"{package}.{name}")


def _reference_bias(
    enc: PositionalEncoding,
    q: torch.Tensor | None,
    k: torch.Tensor | None,
    pos_t: torch.Tensor,
    pos_s: torch.Tensor,
    layer: int | None,
    attn_input: torch.Tensor | None = None,
) -> torch.Tensor:
    if not enc.has_content_bias:
        return enc.position_bias(pos_t, pos_s)
    module = _reference_module(type(enc).__module__.rpartition(".")[2])
    at = sys.modules["posenc_reference"].At(pos_t, pos_s, layer, attn_input)
    bias = module.content_bias(enc, q, k, at)
    return bias.float().masked_fill(pos_s[None, :] > pos_t[:, None], float("-inf"))


@pytest.fixture(scope="session")
def reference_bias() -> Callable[..., torch.Tensor]:
    """reference_bias(enc, q, k, pos_t, pos_s, layer, attn_input=None): the (1|B, H, T, S)
    float32 logit bias of an encoding that has one, added to the scaled logits, -inf where
    j > i. Position biases: ``enc.position_bias``; content biases (Transformer-XL, DeBERTa,
    CoPE, FoX): the papers' naive formulas (tests/reference/NAME.py) from this layer's q and
    k (before ``transform_qk``) or its input."""
    return _reference_bias


@pytest.fixture(scope="session")
def naive_sinusoid() -> Callable[..., torch.Tensor]:
    """naive_sinusoid(d, width, base=10000.0): [sin(dθ_0), cos(dθ_0), …] for integer d."""
    return _reference_module("sinusoidal").sinusoid
