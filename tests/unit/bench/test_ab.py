"""`python -m posenc_cli.bench.ab`: variants with +flex time FlexAttention against the default
kernel in one process, and refuse what cannot run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from posenc_cli.bench.ab import Variant, main
from posenc_cli.common.errors import PosencError

TINY = ["model=tiny", "train.context_length=16", "train.batch_size=2", "data.vocab_size=300"]
QUICK = ["--rounds", "2", "--steps", "1", "--warmup", "0"]


def test_a_variant_names_its_precision_compile_and_kernel() -> None:
    v = Variant.parse("alibi:bf16+compile+flex")
    assert (v.encoding, v.precision, v.compile, v.flex) == ("alibi", "bf16", True, True)
    assert not Variant.parse("fp32").flex
    with pytest.raises(PosencError, match="unknown variant"):
        Variant.parse("fp32+fast")


def test_flex_and_sdpa_evaluations_time_side_by_side(tmp_path: Path) -> None:
    out = tmp_path / "ab.json"
    args = [*QUICK, "--eval", "64", "--variants", "alibi:fp32,alibi:fp32+flex", "--json", str(out)]
    assert main([*args, *TINY, "device=cpu"]) == 0
    rows = json.loads(out.read_text())["variants"]
    assert [r["variant"] for r in rows] == ["alibi:fp32", "alibi:fp32+flex"]
    assert all(r["median_step_s"] > 0 for r in rows)


@pytest.mark.parametrize(
    ("variants", "why"),
    [
        ("alibi:fp32+flex", "trains on CUDA only"),
        ("path:fp32+flex", "no layer of path"),
    ],
)
def test_flex_where_it_cannot_run_is_one_line(
    variants: str, why: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*QUICK, "--variants", variants, *TINY, "device=cpu"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("ab_train: error: ") and why in err and "\n" not in err


@pytest.mark.parametrize(
    ("args", "why"),
    [
        (["--rounds", "0"], "use --rounds >= 1"),
        (["--steps", "0"], "use --steps >= 1"),
        (["--eval", "0"], "use --eval >= 1"),
        (["--eval", "-5"], "use --eval >= 1"),
        (["--warmup", "-1"], "use --warmup >= 0"),
        (["--json", "no/such/folder/ab.json"], "its folder does not exist"),
    ],
)
def test_bad_arguments_are_one_line_before_any_timing(
    args: list[str], why: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*QUICK, *args, "--variants", "fp32", *TINY, "device=cpu"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("ab_train: error: ") and why in err and "\n" not in err
