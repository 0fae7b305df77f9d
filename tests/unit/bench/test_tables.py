"""bench.md: the table a `posenc bench` report holds, then the provenance that makes its
timings readable (command, date, machine, load, settings)."""

from __future__ import annotations

from typing import Any

from posenc_cli.bench.tables import markdown


def record(name: str, mode: str, length: int, tok: float, ratio: float) -> dict[str, Any]:
    return {
        "encoding": name,
        "mode": mode,
        "length": length,
        "tokens_per_s": tok,
        "step_time_ratio_vs_none": ratio,
        "mfu": 0.5,
        "peak_rss_mb": 900.0,
        "rss_growth_mb": 120.0,
        "attention": "flex" if name == "fire" else "sdpa",
    }


def test_bench_md_is_the_table_then_its_provenance() -> None:
    report = {
        "command": "posenc bench bench.eval_factors=[1,256]",
        "date": "2026-01-02 03:04 UTC",
        "machine": {
            "cpu": "Some CPU",
            "cores": 2,
            "threads": 2,
            "torch": "2.13.0",
            "load_before": 6.25,
            "load_after": 7.5,
        },
        "matmul_peak_gflops": {"fp32": 187.4, "bf16": 395.0},
        "config": {"precision": "fp32", "context_length": 128, "batch_size": 16},
        "model": {"d_model": 128, "n_layers": 4, "n_heads": 4},
        "records": [
            record("none", "train", 128, 4000.0, 1.0),
            record("none", "eval", 32768, 2000.0, 1.0),
            record("fire", "train", 128, 3000.0, 4 / 3),
            record("fire", "eval", 32768, 1000.0, 2.0),
        ],
    }
    lines = markdown(report).splitlines()
    assert lines[0].startswith("| encoding | path | train tok/s |")
    assert "eval 32768 tok/s" in lines[0]
    assert lines[3] == "| fire | flex | 3,000 | 1.33x | 50% | 900 | 1,000 | 2.00x | 120 |"
    assert lines[4] == ""
    text = "\n".join(lines[5:])
    for expected in (
        "`posenc bench bench.eval_factors=[1,256]`",
        "2026-01-02 03:04 UTC",
        "Some CPU, 2 cores; torch 2.13.0; 2 threads; matmul peak fp32 187 GFLOP/s",
        "load average: 6.2 before the first case, 7.5 after the last",
        "precision fp32; model d_model 128, 4 layers, 4 heads; training length 128, batch 16",
        "x none: the step time over `none`'s, the two alternating in one process",
    ):
        assert expected in text, expected
