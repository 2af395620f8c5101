"""Follow a run in a plain terminal: the Rich progress display of ``ftui train``.

Reads the run's events through the one follower (``RunFollower``: by byte offset, with the
same end rule as every other reader) and folds them with the one fold (``RunFold``); shows
step / max, loss, tokens/s and an ETA from a recent window of steps (so it stays right after
a resume), prints warnings and the final status. What a job shows (its figures, its start
line, its results) is its kind's (``ftui.rundir.job_kinds``). Ctrl-C asks the run to stop gracefully; a second Ctrl-C kills it. No torch here.
"""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path
from typing import Callable

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ftui.i18n import _
from ftui.rundir.job_kinds import SERVING, job_kind
from ftui.rundir.events import started_job
from ftui.rundir.fold import RunFold
from ftui.rundir.follower import RunFollower
from ftui.rundir.formats import fmt_duration, fmt_phase, fmt_prepare, has_counts, level_word
from ftui.rundir.slurm_verdict import slurm_line
from ftui.rundir.summary import RunSummary, reason_text
from ftui.safety.text import SafeConsole


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
    fold = RunFold(summary)
    interrupts = 0
    stats = {"loss": "-", "tps": "-", "eta": "--:--"}
    progress = Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
        TextColumn("{task.fields[figures]}"), TimeElapsedColumn(), console=console, transient=False,
    )
    task = progress.add_task(escape(run_dir.name), total=None, figures=job_kind(summary.job).bar_figures(stats))
    after: list[str] = []  # a job's results: printed under the finished bar, not above it
    said: dict[str, str] = {}  # the status line printed last (a serve job's counters: again only when they change)

    def show(events: list) -> None:
        for event in events:
            fold.apply(event)
            _show(event, fold, progress, task, stats, console, after, said)

    follower = RunFollower(run_dir, summary, show, offset=start_offset)
    slurm_said = None
    with progress:
        while True:
            try:
                follower.poll()
                line = slurm_line(summary)  # a Slurm run: queued (why, until when) or where it runs, when it changes
                if line is not None and line != slurm_said:
                    console.print(f"[dim]{escape(line)}[/]")
                slurm_said = line
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


def _show(event, fold: RunFold, progress: Progress, task, stats, console: Console, after: list[str],
          said: dict[str, str] | None = None) -> None:
    """Renders one event that ``fold`` has folded: what a job shows is its kind's (ftui.rundir.job_kinds)."""
    summary, kind = fold.summary, event["event"]
    job = job_kind(summary.job)
    if started_job(event) is not None:
        total = summary.max_steps if job.counted else None  # steps or examples; an export's phases count their own
        # a server counts nothing towards an end: no bar, its lines say what it does
        progress.update(task, total=total, figures=job.bar_figures(stats), visible=job.counts != SERVING)
        line = job.start_line(event)
        console.print(f"[dim]{escape(line)}[/]", soft_wrap=not job.trains)
    elif kind == "step":
        stats["loss"] = _num(event.get("loss"))
        stats["tps"] = f"{event.get('tokens_per_s') or 0:,.0f}"
        stats["eta"] = fmt_duration(fold.eta_s())
        progress.update(task, completed=event["step"], figures=job.bar_figures(stats))
    elif kind == "eval" and not job.shows_eval:
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
        stats["tps"] = f"{event.get('tokens_per_s') or 0:,.0f}"
        stats["eta"] = fmt_duration(fold.eta.eta(event["done"], event["total"]))
        progress.update(task, total=event["total"], completed=event["done"], figures=job.bar_figures(stats))
    elif kind == job.result_event and job.result_line is not None:
        if job.results_under_bar:
            after.append(job.result_line(event))
        else:
            console.print(escape(job.result_line(event)), soft_wrap=True)
    elif kind == job.status_event and job.status_line is not None:
        line = job.status_line(event)
        if said is not None and said.get("status") != line:
            said["status"] = line
            console.print(escape(line), soft_wrap=True)


def _num(value: float | None) -> str:
    """A loss for display: a null (NaN or inf at the source) shows as nan."""
    return "nan" if value is None else f"{value:.4f}"


def _print_end(summary: RunSummary, console: Console) -> None:
    colour = {"completed": "green", "stopped": "yellow"}.get(summary.status, "red")
    loss = _(", last loss {loss}").format(loss=f"{summary.last_loss:.4f}") if summary.last_loss is not None else ""
    where = _(" (step {step}{loss})").format(step=summary.step, loss=loss) if job_kind(summary.job).trains else ""
    style = f"bold {colour}"
    # the status word stays English, as in ftui watch and ftui runs (scripts read it); the rest is translated
    console.print(f"[{style}]{summary.status}[/]: {escape(reason_text(summary.reason))}{where}")
    if summary.error_detail:
        console.print(f"[red]{escape(summary.error_detail)}[/]")
    if summary.hint:
        console.print("[bold]" + _("hint") + ":[/] " + escape(summary.hint))
