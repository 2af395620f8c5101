"""The one text form of each figure a run's readers show: durations, sizes, figures, and the
lines a job's events read as.

Both front ends use these (``ftui train``'s display, ``ftui watch``, the dashboard, the job
screens, the runs list), so a size or a duration reads the same everywhere. The numbers come
from a run directory, which is untrusted: each formatter checks what it formats. Torch-free,
and free of both front ends (the app must not import the CLI, nor the CLI the app).
"""

from __future__ import annotations

import re
from typing import Any

from ftui.i18n import N_, _


def fmt_duration(seconds: float | None) -> str:
    if seconds is None:
        return "--:--"
    seconds = int(max(0, seconds))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


def fmt_bytes(n: float | None) -> str:
    """A size in the largest binary unit under 1024 of it: whole KiB and MiB, tenths of GiB
    and TiB ("3 MiB", "1.0 GiB"; a small model's export never reads as 0.00 GiB)."""
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}" if unit in ("GiB", "TiB") else f"{n:.0f} {unit}"
        n /= 1024
    return "-"


def fmt_num(v: float | None, spec: str = ".4f") -> str:
    """A figure that may be missing (null at the source: a NaN loss, no eval yet) as ``-``."""
    return "-" if v is None else format(v, spec)


def fmt_figure(value: int | float) -> str:
    """A stage's own figure (events.extra_figures): whole numbers grouped, others to 4 digits."""
    return f"{value:,}" if type(value) is int else f"{value:.4g}"


def has_counts(event: dict[str, Any]) -> bool:
    """A prepare / progress event's done and total are whole numbers (a run directory is untrusted)."""
    return all(isinstance(event.get(k), int) and not isinstance(event.get(k), bool) for k in ("done", "total"))


def fmt_prepare(event: dict[str, Any]) -> str:
    """A `prepare` event as one line (its numbers may be anything: a run directory is untrusted)."""
    if not has_counts(event):
        return _("preparing data")
    return _("preparing data: {done} / {total} records").format(done=f"{event['done']:,}", total=f"{event['total']:,}")


PHASES = {"load": N_("loading the weights"), "merge": N_("merging"), "save": N_("writing safetensors"), "gguf": N_("writing GGUF")}
WORKING = N_("working")  # a phase no known name fits
LEVELS = {"warning": N_("warning"), "error": N_("error")}


def level_word(level: str) -> str:
    """A log event's level (warning, error) in the interface's language."""
    return _(LEVELS.get(level, level))


def fmt_phase(event: dict[str, Any]) -> str:
    """An export job's progress event as one line (a job directory is untrusted: known phases only)."""
    name = _(PHASES.get(str(event.get("phase")), WORKING))
    return f"{name}: {event['done']:,} / {event['total']:,}" if event.get("total", 0) > 1 else name


def fmt_export(event: dict[str, Any]) -> str:
    """An export job's result as plain text (escape it before markup)."""
    files = event.get("files") if isinstance(event.get("files"), list) else []
    size = event.get("bytes")
    size_text = f", {fmt_bytes(size)}" if isinstance(size, (int, float)) and not isinstance(size, bool) else ""
    return _("exported to {out}: {count} files{size}").format(out=event.get("out"), count=len(files), size=size_text)


def fmt_predict(event: dict[str, Any]) -> str:
    """A predict job's results as one line (LLaMA-Factory's metric names; numbers only, and the
    backend's name when it is a plain word: a job directory is untrusted), with how fast it
    went and with which backend."""
    names = {"predict_bleu_4": "BLEU-4", "predict_rouge_1": "ROUGE-1", "predict_rouge_2": "ROUGE-2",
             "predict_rouge_l": "ROUGE-L", "predict_samples_per_second": _("examples/s"),
             "predict_tokens_per_second": _("tokens/s")}
    parts = [f"{label} {event[n]:.2f}" for n, label in names.items()
             if isinstance(event.get(n), (int, float)) and not isinstance(event.get(n), bool)]
    backend = event.get("infer_backend")
    if isinstance(backend, str) and re.fullmatch(r"[a-z][a-z0-9_]{0,31}", backend):
        parts.append(_("backend {name}").format(name=backend))
    return _("results: {scores}").format(scores=", ".join(parts) if parts else _("no scores"))
