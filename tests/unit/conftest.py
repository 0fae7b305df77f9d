"""A CS336 assignment-1 model written independently of posenc: plain torch over a state dict
with the assignment's documented parameter names, and a naive byte-level BPE."""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable
from itertools import pairwise

import pytest
import torch
from torch import Tensor

V = 300
D = 32
L = 2
H = 4
F_FF = 64
THETA = 10000.0
#: GPT-2's pre-tokenizer regex restricted to ASCII (the test texts are ASCII): \p{L} -> letters.
ASCII_PAT = re.compile(r"'(?:[sdmt]|ll|ve|re)| ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]+|\s+(?!\S)|\s+")


def random_state(seed: int = 0) -> dict[str, Tensor]:
    g = torch.Generator().manual_seed(seed)

    def w(*shape: int) -> Tensor:
        return torch.randn(*shape, generator=g) * 0.2

    state = {
        "token_embeddings.weight": w(V, D),
        "ln_final.weight": 1 + w(D),
        "lm_head.weight": w(V, D),
    }
    for i in range(L):
        p = f"layers.{i}."
        state.update(
            {
                p + "ln1.weight": 1 + w(D),
                p + "ln2.weight": 1 + w(D),
                p + "attn.q_proj.weight": w(D, D),
                p + "attn.k_proj.weight": w(D, D),
                p + "attn.v_proj.weight": w(D, D),
                p + "attn.output_proj.weight": w(D, D),
                p + "ffn.w1.weight": w(F_FF, D),
                p + "ffn.w2.weight": w(D, F_FF),
                p + "ffn.w3.weight": w(F_FF, D),
            }
        )
    return state


def rmsnorm(x: Tensor, g: Tensor) -> Tensor:
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * g


def rope(x: Tensor, theta: float) -> Tensor:
    """Rotate pairs (2k, 2k+1) of the last dimension by position·theta^(-2k/d_k): the
    frequencies as float32 (as the model stores them), the angles in float64."""
    T = x.shape[-2]
    dk = x.shape[-1]
    k = torch.arange(dk // 2, dtype=torch.float64)
    freq = (theta ** (-2 * k / dk)).float().double()
    angle = torch.arange(T, dtype=torch.float64)[:, None] * freq
    cos = angle.cos().float()
    sin = angle.sin().float()
    x0 = x[..., 0::2]
    x1 = x[..., 1::2]
    out = torch.empty_like(x)
    out[..., 0::2] = x0 * cos - x1 * sin
    out[..., 1::2] = x0 * sin + x1 * cos
    return out


def cs336_logits(
    state: dict[str, Tensor], ids: Tensor, n_heads: int = H, theta: float = THETA
) -> Tensor:
    x = state["token_embeddings.weight"][ids]
    B, T, _ = x.shape
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    for i in range(L):
        p = f"layers.{i}."
        h = rmsnorm(x, state[p + "ln1.weight"])
        q, k, v = (h @ state[p + f"attn.{n}_proj.weight"].T for n in "qkv")
        q, k, v = (t.view(B, T, n_heads, -1).transpose(1, 2) for t in (q, k, v))
        q, k = rope(q, theta), rope(k, theta)
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
        att = torch.softmax(scores.masked_fill(~mask, float("-inf")), -1) @ v
        x = x + att.transpose(1, 2).reshape(B, T, -1) @ state[p + "attn.output_proj.weight"].T
        h = rmsnorm(x, state[p + "ln2.weight"])
        a = h @ state[p + "ffn.w1.weight"].T
        b = h @ state[p + "ffn.w3.weight"].T
        x = x + (a * torch.sigmoid(a) * b) @ state[p + "ffn.w2.weight"].T
    return rmsnorm(x, state["ln_final.weight"]) @ state["lm_head.weight"].T


def train_bpe(
    text: str, n_merges: int, special: str = "<|endoftext|>"
) -> tuple[dict[int, bytes], list[tuple[bytes, bytes]]]:
    """The assignment's BPE: most frequent pair inside pre-tokens, ties to the greater pair."""
    words = Counter(
        tuple(bytes([b]) for b in m.encode())
        for part in text.split(special)
        for m in ASCII_PAT.findall(part)
    )
    vocab = {i: bytes([i]) for i in range(256)}
    vocab[256] = special.encode()
    merges = []
    for _ in range(n_merges):
        pairs: Counter[tuple[bytes, bytes]] = Counter()
        for word, n in words.items():
            for pair in pairwise(word):
                pairs[pair] += n
        if not pairs:
            break
        best = max(pairs, key=lambda p: (pairs[p], p))
        merges.append(best)
        vocab[len(vocab)] = best[0] + best[1]
        words = Counter({_merge(w, best): n for w, n in words.items()})
    return vocab, merges


def _merge(word: tuple[bytes, ...], pair: tuple[bytes, bytes]) -> tuple[bytes, ...]:
    out = []
    i = 0
    while i < len(word):
        if i + 1 < len(word) and (word[i], word[i + 1]) == pair:
            out.append(word[i] + word[i + 1])
            i += 2
        else:
            out.append(word[i])
            i += 1
    return tuple(out)


def bpe_encode(
    text: str,
    vocab: dict[int, bytes],
    merges: list[tuple[bytes, bytes]],
    special: str = "<|endoftext|>",
) -> list[int]:
    """Apply the merges in rank order to each pre-token (the assignment's encode)."""
    ids_of = {b: i for i, b in vocab.items()}
    out: list[int] = []
    for n, part in enumerate(text.split(special)):
        if n:
            out.append(ids_of[special.encode()])
        for m in ASCII_PAT.findall(part):
            word = tuple(bytes([b]) for b in m.encode())
            for pair in merges:
                word = _merge(word, pair)
            out += [ids_of[t] for t in word]
    return out


@pytest.fixture(scope="session")
def cs336() -> dict[str, Callable[..., object]]:
    """The independent CS336 reference: random_state, cs336_logits, train_bpe, bpe_encode."""
    return {
        "random_state": random_state,
        "logits": cs336_logits,
        "train_bpe": train_bpe,
        "encode": bpe_encode,
    }
