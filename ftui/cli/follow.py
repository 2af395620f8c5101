"""Follow a run in a plain terminal: the Rich progress display of ``ftui train``.

Reads the run's events through the one follower (``RunFollower``: by byte offset, with the
same end rule as every other reader), shows step / max, loss, tokens/s and an ETA from a
recent window of steps (so it stays right after a resume), prints warnings and the final
status. Ctrl-C asks the run to stop gracefully; a second Ctrl-C kills it. No torch here.
"""

from __future__ import annotations

import collections
import signal
import threading
import time
from pathlib import Path
from typing import Callable

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ftui.i18n import N_, _
from ftui.rundir.runs import RunFollower, RunSummary, reason_text
from ftui.safety.text import SafeConsole


class EtaWindow:
    """Seconds per step over the last ``size`` step events: robust to resumes and warm-up.
    The window is long (50 events) so an eval or a checkpoint save does not swing the ETA,
    and run_start is its first point, so the first step event already gives an ETA (with
    logging_steps 10 the second one may be minutes away)."""

    def __init__(self, size: int = 50):
        self.points: collections.deque[tuple[float, int]] = collections.deque(maxlen=size)

    def start(self, event: dict) -> None:
        """A run_start event: the loop begins at its step (0, or the resumed checkpoint's)."""
        t, step = event.get("t"), event.get("resumed_from_step") or 0
        if isinstance(t, (int, float)) and isinstance(step, int) and not isinstance(step, bool):
            self.points.clear()
            self.points.append((float(t), step))

    def add(self, t: float, step: int) -> None:
        if self.points and step <= self.points[-1][1]:
            self.points.clear()  # a resume restarted the count
        self.points.append((t, step))

    def eta(self, step: int, max_steps: int | None) -> float | None:
        if not max_steps or len(self.points) < 2:
            return None
        (t0, s0), (t1, s1) = self.points[0], self.points[-1]
        if s1 <= s0 or t1 <= t0:
            return None
        return (max_steps - step) * (t1 - t0) / (s1 - s0)


def fmt_duration(seconds: float | None) -> str:
    if seconds is None:
        return "--:--"
    seconds = int(max(0, seconds))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


def fmt_prepare(event: dict) -> str:
    """A `prepare` event as one line (its numbers may be anything: a run directory is untrusted)."""
    if not has_counts(event):
        return _("preparing data")
    return _("preparing data: {done} / {total} records").format(done=f"{event['done']:,}", total=f"{event['total']:,}")


JOB_ENGINES = ("export", "predict", "eval")  # run_start's engine for a job: it has no steps (its reason says what it did)
NOT_A_TERMINAL_WIDTH = 160  # the bar's columns (a long run id, N/N, figures, time) fit without an ellipsis


def follow_run(
    run_dir: Path,
    console: Console | None = None,
    poll_s: float = 0.5,
    on_interrupt: Callable[[int], None] | None = None,
    start_offset: int = 0,
) -> RunSummary:
    """Shows the run until it ends; returns the final summary (its status decides the exit code).

    ``start_offset``: where in events.jsonl to begin (a resumed run follows only its new part;
    the old part ends with the previous run_end)."""
    # untrusted text: control characters shown as escapes, no `:x:` -> emoji; paths unbroken
    console = console or SafeConsole(emoji=False, soft_wrap=True)
    if not console.is_terminal and console.width < NOT_A_TERMINAL_WIDTH:
        console.width = NOT_A_TERMINAL_WIDTH  # a log or a pipe: the bar's one line whole, not cut at 80 columns
    if on_interrupt is not None and threading.current_thread() is threading.main_thread():
        # Ctrl-C must reach us even when started with SIGINT ignored (e.g. from a background
        # job of a non-interactive shell, where Python inherits SIG_IGN).
        signal.signal(signal.SIGINT, signal.default_int_handler)
    summary = RunSummary(run_id=run_dir.name, path=run_dir)
    eta = EtaWindow()
    interrupts = 0
    stats = {"loss": "-", "tps": "-", "eta": "--:--", "job": "train"}
    progress = Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
        TextColumn("{task.fields[figures]}"), TimeElapsedColumn(), console=console, transient=False,
    )
    task = progress.add_task(escape(run_dir.name), total=None, figures=figures_text(stats))
    after: list[str] = []  # a job's results: printed under the finished bar, not above it

    def show(events: list) -> None:
        for event in events:
            summary.apply(event)
            _show(event, summary, progress, task, eta, stats, console, after)

    follower = RunFollower(run_dir, summary, show, offset=start_offset)
    with progress:
        while True:
            try:
                follower.poll()
                if follower.ended:
                    break
                time.sleep(poll_s)
            except KeyboardInterrupt:
                interrupts += 1
                if on_interrupt is not None:
                    on_interrupt(interrupts)
    for line in after:
        console.print(line)
    _print_end(summary, console)
    return summary


def figures_text(stats: dict[str, str]) -> str:
    """The bar's figures for what is followed: a training run's loss, tokens/s and ETA; a
    predict job's tokens/s and ETA (it has no loss); an eval job's ETA."""
    if stats["job"] == "export":
        return ""  # its phases are lines of their own; the bar counts the current one's parts
    if stats["job"] == "eval":
        return _("ETA {eta}").format(**stats)
    if stats["job"] == "predict":
        return _("{tps} tok/s  ETA {eta}").format(**stats)
    return _("loss {loss}  {tps} tok/s  ETA {eta}").format(**stats)


def _show(event, summary: RunSummary, progress: Progress, task, eta: EtaWindow, stats, console: Console, after: list[str]) -> None:
    kind = event["event"]
    if kind == "run_start" and event.get("job") == "export":
        stats["job"] = "export"
        progress.update(task, figures=figures_text(stats))
        line = _("exporting {source} as {precision} to {out}").format(
            source=event.get("source"), precision=event.get("precision"), out=event.get("out"))
        console.print(f"[dim]{escape(line)}[/]", soft_wrap=True)
    elif kind == "run_start" and event.get("job") in ("predict", "eval"):
        stats["job"] = event["job"]
        examples = event.get("examples") if isinstance(event.get("examples"), int) else None
        progress.update(task, total=examples, figures=figures_text(stats))
        eta.start(event)
        line = _("{job}: {source} on {dataset}, {examples} examples · {device} · {precision} · {world_size} process(es)").format(
            job=event["job"], source=event.get("source"), dataset=event.get("dataset"), examples=examples,
            device=event.get("device"), precision=event.get("precision"), world_size=event.get("world_size"))
        console.print(f"[dim]{escape(line)}[/]", soft_wrap=True)
    elif kind == "run_start":
        progress.update(task, total=event.get("max_steps"))
        eta.start(event)
        line = _("{model} · {method} · {engine} · {precision} · {world_size} process(es) · "
                 "{trainable} of {total} parameters train").format(
            model=event.get("model"), method=event.get("method"), engine=event.get("engine"), precision=event.get("precision"),
            world_size=event.get("world_size"), trainable=f"{event.get('trainable_params') or 0:,}",
            total=f"{event.get('total_params') or 0:,}")
        console.print(f"[dim]{escape(line)}[/]")
    elif kind == "step":
        eta.add(event["t"], event["step"])
        loss = event.get("loss")
        stats["loss"] = _num(loss)
        stats["tps"] = f"{event.get('tokens_per_s') or 0:,.0f}"
        stats["eta"] = fmt_duration(eta.eta(event["step"], summary.max_steps))
        progress.update(task, completed=event["step"], figures=figures_text(stats))
    elif kind == "eval" and stats["job"] == "eval":
        pass  # an eval job's scores are its end line (its reason), said once
    elif kind == "eval":
        console.print(_("step {step}: eval_loss {loss}").format(step=event["step"], loss=_num(event.get("eval_loss"))))
    elif kind == "log" and event.get("level") in ("warning", "error"):
        console.print(f"[yellow]{level_word(event['level'])}:[/] {escape(str(event.get('message')))}")
    elif kind == "checkpoint":
        line = _("checkpoint at step {step}: {path}").format(step=event["step"], path=event.get("path"))
        console.print(f"[dim]{escape(line)}[/]")
    elif kind == "prepare":
        console.print(f"[dim]{fmt_prepare(event)}[/]")
    elif kind == "progress" and has_counts(event) and "phase" in event:  # an export job's phases
        if event["done"] == 0:
            console.print(f"[dim]{fmt_phase(event)}[/]")
        progress.update(task, total=event["total"], completed=event["done"])
    elif kind == "progress" and has_counts(event):
        eta.add(event["t"], event["done"])
        stats["tps"] = f"{event.get('tokens_per_s') or 0:,.0f}"
        stats["eta"] = fmt_duration(eta.eta(event["done"], event["total"]))
        progress.update(task, total=event["total"], completed=event["done"], figures=figures_text(stats))
    elif kind == "predict":
        after.append(fmt_predict(event))
    elif kind == "export":
        console.print(escape(fmt_export(event)))


def has_counts(event: dict) -> bool:
    """A prepare / progress event's done and total are whole numbers (a run directory is untrusted)."""
    return all(isinstance(event.get(k), int) and not isinstance(event.get(k), bool) for k in ("done", "total"))


PHASES = {"load": N_("loading the weights"), "merge": N_("merging"), "save": N_("writing safetensors"), "gguf": N_("writing GGUF")}
WORKING = N_("working")  # a phase no known name fits
LEVELS = {"warning": N_("warning"), "error": N_("error")}


def level_word(level: str) -> str:
    """A log event's level (warning, error) in the interface's language."""
    return _(LEVELS.get(level, level))


def fmt_phase(event: dict) -> str:
    """An export job's progress event as one line (a job directory is untrusted: known phases only)."""
    name = _(PHASES.get(str(event.get("phase")), WORKING))
    return f"{name}: {event['done']:,} / {event['total']:,}" if event.get("total", 0) > 1 else name


def fmt_export(event: dict) -> str:
    """An export job's result as plain text (escape it before markup)."""
    files = event.get("files") if isinstance(event.get("files"), list) else []
    size = event.get("bytes")
    size_text = f", {fmt_bytes(size)}" if isinstance(size, (int, float)) and not isinstance(size, bool) else ""
    return _("exported to {out}: {count} files{size}").format(out=event.get("out"), count=len(files), size=size_text)


def fmt_bytes(size: float) -> str:
    """A size in GiB, or MiB below one GiB (a small model's export read as 0.00 GiB)."""
    return f"{size / 2**30:.2f} GiB" if size >= 2**30 else f"{size / 2**20:.1f} MiB"


def fmt_predict(event: dict) -> str:
    """A predict job's results as one line (LLaMA-Factory's metric names; numbers only: a job
    directory is untrusted)."""
    names = {"predict_bleu_4": "BLEU-4", "predict_rouge_1": "ROUGE-1", "predict_rouge_2": "ROUGE-2",
             "predict_rouge_l": "ROUGE-L", "predict_samples_per_second": _("examples/s")}
    parts = [f"{label} {event[n]:.2f}" for n, label in names.items()
             if isinstance(event.get(n), (int, float)) and not isinstance(event.get(n), bool)]
    return _("results: {scores}").format(scores=", ".join(parts) if parts else _("no scores"))


def _num(value: float | None) -> str:
    """A loss for display: a null (NaN or inf at the source) shows as nan."""
    return "nan" if value is None else f"{value:.4f}"


def _print_end(summary: RunSummary, console: Console) -> None:
    colour = {"completed": "green", "stopped": "yellow"}.get(summary.status, "red")
    loss = _(", last loss {loss}").format(loss=f"{summary.last_loss:.4f}") if summary.last_loss is not None else ""
    where = "" if summary.engine in JOB_ENGINES else _(" (step {step}{loss})").format(step=summary.step, loss=loss)
    style = f"bold {colour}"
    # the status word stays English, as in ftui watch and ftui runs (scripts read it); the rest is translated
    console.print(f"[{style}]{summary.status}[/]: {escape(reason_text(summary.reason))}{where}")
    if summary.error_detail:
        console.print(f"[red]{escape(summary.error_detail)}[/]")
    if summary.hint:
        console.print("[bold]" + _("hint") + ":[/] " + escape(summary.hint))
