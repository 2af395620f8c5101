"""``ftui watch RUN``: plain progress lines for terminals without a TTY
(``ssh host ftui watch RUN`` without ``-t``, CI logs, ``| tee``). No colours, no cursor
movement: one line per new step event (at most one per interval), then the final status.
What the run directory says is shown literally (``ftui.safety.text``): no escape sequence in a
failure reason or a warning reaches the terminal.

A long run's history is not replayed: watch reads the head of events.jsonl (run_start)
and starts at its last few MB, so a finished run with a million steps answers at once.
Reading and the end rule are ``RunFollower``'s and the fold ``RunFold``'s, as for every
other reader of a run; what a job prints is its kind's (``ftui.rundir.job_kinds``)."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TextIO

from ftui.i18n import _
from ftui.rundir.job_kinds import job_kind
from ftui.rundir.event_reader import StepColumns
from ftui.rundir.events import START_EVENTS, extra_figures, started_job
from ftui.rundir.fold import RunFold
from ftui.rundir.follower import RunFollower
from ftui.rundir.formats import fmt_duration, fmt_figure, fmt_phase, fmt_prepare, has_counts, level_word
from ftui.rundir.slurm_verdict import slurm_line
from ftui.rundir.summary import RunSummary, reason_text
from ftui.safety.text import VisibleWriter

CHUNK = 8 << 20  # bytes of events read per check (a long backlog is read in several)
HEAD_BYTES = 256 << 10
TAIL_BYTES = 4 << 20  # where watch starts in a long run: the last steps, evals and the end


def _fmt(value, spec: str) -> str:
    return "nan" if value is None else format(value, spec)


def _extras(event: dict, leave_out: frozenset[str] = frozenset()) -> str:
    """A newer stage's figures (events.extra_figures: printable names, finite numbers)."""
    return "".join(f" {name} {fmt_figure(value)}" for name, value in extra_figures(event) if name not in leave_out)


# A grpo or ppo step's figures (the names the rollout stages write), on a line of their own.
REWARD_FIGURES = ("reward", "reward_std", "completion_length", "clipped_ratio", "frac_reward_zero_std", "kl", "entropy", "clip_ratio")


def reward_line(event: dict) -> tuple[str, frozenset[str]]:
    """``  reward 0.75 ± 0.3 (accuracy 0.8, format 0.7) · length 34.5 (10% cut) · kl 0.0012 ...``
    for a step event with a ``reward`` figure (else ""), and the names it shows (the step line
    leaves them out)."""
    figures = dict(extra_figures(event))
    if "reward" not in figures:
        return "", frozenset()
    per_function = [(name, value) for name, value in figures.items() if name.startswith("reward_") and name != "reward_std"]
    text = "  " + _("reward") + f" {fmt_figure(figures['reward'])}"
    if "reward_std" in figures:
        text += f" ± {fmt_figure(figures['reward_std'])}"
    if per_function:
        text += " (" + ", ".join(f"{name[len('reward_'):]} {fmt_figure(value)}" for name, value in per_function) + ")"
    parts = [text]
    if "completion_length" in figures:
        part = _("length") + f" {fmt_figure(figures['completion_length'])}"
        if "clipped_ratio" in figures:
            part += " (" + _("{share}% cut").format(share=f"{100 * figures['clipped_ratio']:.0f}") + ")"
        parts.append(part)
    if "frac_reward_zero_std" in figures:
        parts.append(_("zero-spread groups {share}%").format(share=f"{100 * figures['frac_reward_zero_std']:.0f}"))
    parts += [f"{name} {fmt_figure(figures[name])}" for name in ("kl", "entropy", "clip_ratio") if name in figures]
    return " · ".join(parts), frozenset(REWARD_FIGURES) | {name for name, _value in per_function}


def _print_events(events, fold: RunFold, last_printed, out: TextIO, said: dict[str, str] | None = None):
    """Folds a batch of events (the one fold, ``RunFold``) and prints what it says; returns
    the step last printed. What a job prints is its kind's (ftui.rundir.job_kinds); ``said``:
    the status line printed last (a serve job's counters: printed again only when they change)."""
    summary, latest = fold.summary, None
    said = {} if said is None else said
    for e in events:
        fold.apply(e)
        if type(e) is StepColumns:  # a run of step lines: only the last one is printed
            continue
        job = job_kind(summary.job)
        if e["event"] == "step":
            latest = e
        elif started_job(e) is not None:
            print(f"{summary.run_id}: {job.watch_head(e)}", file=out, flush=True)
        elif e["event"] == "eval":
            print(_("step {step} eval_loss {loss}").format(step=e["step"], loss=_fmt(e.get("eval_loss"), ".4f")) + _extras(e),
                  file=out, flush=True)
        elif e["event"] == "log" and e.get("level") in ("warning", "error"):
            print(f"{level_word(e['level'])}: {e.get('message')}", file=out, flush=True)
        elif e["event"] == "prepare":
            print(fmt_prepare(e), file=out, flush=True)
        elif e["event"] == "progress" and has_counts(e) and "phase" in e:
            if e["done"] == 0 or (e["done"] == e["total"] > 1):  # a phase's start (and a long one's end), once each
                print(fmt_phase(e), file=out, flush=True)
        elif e["event"] == "progress" and has_counts(e):
            print(_("examples {done}/{total} examples/s {rate} eta {eta}").format(
                done=e["done"], total=e["total"], rate=f"{e.get('examples_per_s') or 0:,.2f}",
                eta=fmt_duration(fold.eta.eta(e["done"], e["total"]))), file=out, flush=True)
        elif e["event"] == job.result_event and job.result_line is not None:
            print(job.result_line(e), file=out, flush=True)
        elif e["event"] == job.status_event and job.status_line is not None:
            line = job.status_line(e)
            if said.get("status") != line:
                said["status"] = line
                print(line, file=out, flush=True)
    if latest is not None and latest["step"] != last_printed:
        last_printed = latest["step"]
        rewards, shown = reward_line(latest)
        print(_("step {step}/{max_steps} loss {loss} lr {lr} tok/s {tps} eta {eta}").format(
            step=latest["step"], max_steps=summary.max_steps or "?", loss=_fmt(latest.get("loss"), ".4f"),
            lr=f"{latest.get('lr') or 0:.3e}", tps=f"{latest.get('tokens_per_s') or 0:,.0f}",
            eta=fmt_duration(fold.eta.eta(latest["step"], summary.max_steps))) + _extras(latest, shown), file=out, flush=True)
        if rewards:
            print(rewards, file=out, flush=True)
    return last_printed


def watch_run(run_dir: Path, interval: float = 2.0, out: TextIO | None = None) -> str:
    # every line carries text from the run directory (model names, warnings, failure reasons):
    # its control characters are shown as escapes, to a terminal and a pipe alike
    out = VisibleWriter(out or sys.stdout)
    summary = RunSummary(run_id=Path(run_dir).name, path=Path(run_dir))
    fold = RunFold(summary)
    last_printed = None
    said: dict[str, str] = {}

    def show(events: list) -> None:
        nonlocal last_printed
        last_printed = _print_events(events, fold, last_printed, out, said)

    follower = RunFollower(run_dir, summary, show, chunk=CHUNK, compact=True)
    # the head's start event, and a server's URL (a long-lived server's counters fill the middle)
    skipped = follower.start_at_tail(HEAD_BYTES, TAIL_BYTES, head_kinds=(*START_EVENTS, "serve_ready"))
    if skipped is not None:
        print(_("({size} MB of earlier events not shown; ftui attach {run} shows the whole run)").format(
            size=f"{(skipped[1] - skipped[0]) / 1e6:.0f}", run=summary.run_id), file=out, flush=True)
    slurm_said = None
    while True:
        follower.poll()
        line = slurm_line(summary)  # a Slurm run: queued (why, until when) or where it runs, again when it changes
        if line is not None and line != slurm_said:
            print(line, file=out, flush=True)
        slurm_said = line
        if follower.ended:
            break
        if not follower.catching_up:  # a long backlog is read on without a pause
            time.sleep(interval)
    # the status word stays English (scripts read it); the words around it are translated
    where = _(" (step {step})").format(step=summary.step) if job_kind(summary.job).trains else ""
    print(f"{summary.status}: {reason_text(summary.reason)}" + where, file=out, flush=True)
    if summary.error_detail:
        print(summary.error_detail, file=out, flush=True)
    if summary.hint:
        print(_("hint") + ": " + summary.hint, file=out, flush=True)
    return summary.status
