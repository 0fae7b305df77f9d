"""The Markdown summary of an inspection and, for a run, its TensorBoard images and scalars."""

from __future__ import annotations

import io
import re
from pathlib import Path

import numpy as np
from matplotlib.image import imread
from torch.utils.tensorboard import SummaryWriter

from posenc_cli.common.shown import shown
from posenc_cli.config.schema import ModelConfig
from posenc_cli.inspection.base import InspectReport
from posenc_cli.inspection.properties import HOLDS, Property

#: Suffix of the event files `posenc inspect` writes into a run's folder; a new inspection
#: replaces the files of an earlier one (and no other).
EVENT_SUFFIX = ".inspect"


def cell(text: str) -> str:
    """Text safe inside a Markdown table cell."""
    return text.replace("|", "\\|")


def verdict(p: Property) -> str:
    if p.holds is None:
        return "n/a"
    return "holds" if p.holds else "does not hold"


def summary_markdown(report: InspectReport) -> str:
    s = report.subject
    cfg = s.cfg
    enc = s.encoding
    m = cfg.model
    what = f"step {s.step} of a trained run" if s.trained else "untrained (as configured)"
    lines = [
        f"# posenc inspect: {cfg.encoding.name}",
        "",
        f"{what}; model d_model {m.d_model} × {m.n_layers} layers × {m.n_heads} heads "
        f"(head dim {enc.head_dim}), {s.model.num_parameters():,} parameters; training "
        f"length L = {s.train_length}, longest length {s.longest}.",
        "",
        f"Encoding: `{enc!r}`".replace("\n", " "),
        "",
        *_layout_lines(m),
    ]
    lines += [*(f"Note: {n}" for n in report.notes), ""] if report.notes else []
    lines += _figure_lines(report) + _property_lines(report)
    lines += _attention_lines(report)
    lines += [
        "",
        "How each figure follows from the derivations: docs/encodings.md, section "
        '"What `posenc inspect` draws".',
        "",
        f"Computed in {report.seconds:.1f} s.",
        "",
    ]
    return "\n".join(lines)


def _layout_lines(m: ModelConfig) -> list[str]:
    """The per-layer settings (model.layers, windows, chunks) that make layers differ, and the
    parameters of the other encodings model.layers names, so a reader of the figures knows
    which layer does what."""
    patterns = [(k, getattr(m, k)) for k in ("layers", "windows", "chunks")]
    written = [f"model.{k}={shown(v, ', ')}" for k, v in patterns if v is not None]
    if not written:
        return []
    named = [
        f"{name}: " + ", ".join(f"{k}={shown(v, ', ')}" for k, v in params.items())
        for name, params in m.layer_encodings.items()
        if params
    ]
    parameters = [f"Their parameters: {'; '.join(named)}.", ""] if named else []
    return [f"Layers: {'; '.join(written)} (each repeated over the layers).", "", *parameters]


def _figure_lines(report: InspectReport) -> list[str]:
    """The table of figures written, and those skipped with the reason."""
    lines: list[str] = []
    lines += [
        "## Figures",
        "",
        "| file | what it shows | derivation (docs/encodings.md) |",
        "|:---|:---|:---|",
    ]
    lines += [
        f"| [{name}]({name}) | {cell(caption)} | {cell(why)} |"
        for name, caption, why in report.files
    ]
    if report.skipped:
        lines += ["", "Skipped:", ""]
        lines += [f"- {name}: {why}" for name, why in report.skipped]
    return lines


def _property_lines(report: InspectReport) -> list[str]:
    """The table of the encoding's properties measured on this model."""
    lines: list[str] = []
    lines += [
        "",
        f"## Properties of this model (relative error; holds below {HOLDS:g})",
        "",
        "| property | error | measured | the encoding claims it | note |",
        "|:---|---:|:---|:---|:---|",
    ]
    for p in report.properties:
        claim = "—" if p.expected is None else ("yes" if p.expected else "no")
        error = "—" if p.error is None else f"{p.error:.1e}"
        lines.append(f"| {cell(p.name)} | {error} | {verdict(p)} | {claim} | {cell(p.note)} |")
    return lines


def _attention_lines(report: InspectReport) -> list[str]:
    s = report.subject
    if not s.trained or not s.computed("model", s.longest):
        return []
    short = s.stats("model", s.train_length)
    long = s.stats("model", s.longest)
    factor = s.longest // s.train_length
    lines = [
        "",
        "## Attention per layer (mean over heads, held-out text)",
        "",
        f"| layer | distance 1x | distance {factor}x | entropy 1x | entropy {factor}x "
        f"| mass beyond L at {factor}x |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for i in range(short.mean_distance.shape[0]):
        beyond = "—" if long.beyond is None else f"{long.beyond[i].mean():.3f}"
        lines.append(
            f"| {i + 1} | {short.mean_distance[i].mean():.1f} | "
            f"{long.mean_distance[i].mean():.1f} | {short.entropy[i].mean():.2f} | "
            f"{long.entropy[i].mean():.2f} | {beyond} |"
        )
    return lines


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")[:60]


def log_tensorboard(run_dir: Path, report: InspectReport) -> None:
    """Images, scalars and the summary at the checkpoint's step in the run's event folder,
    beside its training curves; the event files of an earlier inspection are replaced."""

    for old in run_dir.glob(f"events.out.tfevents.*{EVENT_SUFFIX}"):
        if old.is_file() and not old.is_symlink():
            old.unlink()
    step = report.subject.step
    writer = SummaryWriter(str(run_dir), filename_suffix=EVENT_SUFFIX)
    try:
        for name, _, _ in report.files:
            image = imread(io.BytesIO((report.out_dir / name).read_bytes()), format="png")
            writer.add_image(
                f"inspect/{Path(name).stem}",
                np.ascontiguousarray(image[..., :3]),
                step,
                dataformats="HWC",
            )
        for tag, value in report.scalars.items():
            writer.add_scalar(f"inspect/{tag}", value, step)
        for p in report.properties:
            if p.error is not None:
                writer.add_scalar(f"inspect/property/{_slug(p.name)}", p.error, step)
        writer.add_text("inspect/summary", summary_markdown(report), step)
    finally:
        writer.close()
