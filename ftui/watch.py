"""``ftui watch RUN``: plain progress lines for terminals without a TTY
(``ssh host ftui watch RUN`` without ``-t``, CI logs, ``| tee``). No colours, no cursor
movement: one line per new step event (at most one per interval), then the final status.

A long run's history is not replayed: watch reads the head of events.jsonl (run_start)
and starts at its last few MB, so a finished run with a million steps answers at once."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TextIO

from ftui.events import EVENTS_FILE, EventReader, StepColumns, UnreadableFile, file_size, line_start_after
from ftui.follow import EtaWindow, fmt_duration, fmt_prepare
from ftui.runs import RunSummary, launcher_gone

CHUNK = 8 << 20  # bytes of events read per check (a long backlog is read in several)
HEAD_BYTES = 256 << 10
TAIL_BYTES = 4 << 20  # where watch starts in a long run: the last steps, evals and the end


def _fmt(value, spec: str) -> str:
    return "nan" if value is None else format(value, spec)


def _print_events(events, summary: RunSummary, eta: EtaWindow, last_printed, out: TextIO):
    """Prints what a batch of events says; returns the step last printed."""
    latest = None
    for e in events:
        if type(e) is StepColumns:  # a run of step lines: only the last one is printed
            summary.step = e.step[-1]
            for t, s in zip(e.t[-eta.points.maxlen:], e.step[-eta.points.maxlen:]):
                eta.add(t, s)
            continue
        summary.apply(e)
        if e["event"] == "step":
            eta.add(e["t"], e["step"])
            latest = e
        elif e["event"] == "run_start":
            print(f"{summary.run_id}: {e.get('model')} {e.get('method')} {e.get('engine')} {e.get('precision')} "
                  f"world_size={e.get('world_size')} max_steps={e.get('max_steps')}", file=out, flush=True)
        elif e["event"] == "eval":
            print(f"step {e['step']} eval_loss {_fmt(e.get('eval_loss'), '.4f')}", file=out, flush=True)
        elif e["event"] == "log" and e.get("level") in ("warning", "error"):
            print(f"{e['level']}: {e.get('message')}", file=out, flush=True)
        elif e["event"] == "prepare":
            print(fmt_prepare(e), file=out, flush=True)
    if latest is not None and latest["step"] != last_printed:
        last_printed = latest["step"]
        print(f"step {latest['step']}/{summary.max_steps or '?'} loss {_fmt(latest.get('loss'), '.4f')} "
              f"lr {latest.get('lr') or 0:.3e} tok/s {latest.get('tokens_per_s') or 0:,.0f} "
              f"eta {fmt_duration(eta.eta(latest['step'], summary.max_steps))}", file=out, flush=True)
    return last_printed


def _skip_history(path: Path, summary: RunSummary, reader: EventReader, out: TextIO) -> None:
    """For a long run: fold the head's run_start, then start the reader at the tail."""
    try:
        size = file_size(path)
        if size <= HEAD_BYTES + TAIL_BYTES:
            return
        head = EventReader(path).read_new(HEAD_BYTES)
        _print_events([e for e in head if e["event"] == "run_start"], summary, EtaWindow(), None, out)
        reader.offset = line_start_after(path, size - TAIL_BYTES)
    except UnreadableFile as err:
        reader.problem = str(err)
        return
    print(f"({reader.offset / 1e6:.0f} MB of earlier events not shown; ftui attach {summary.run_id} shows the whole run)",
          file=out, flush=True)


def _behind(path: Path, reader: EventReader) -> bool:
    try:
        return reader.offset < file_size(path)
    except UnreadableFile:
        return False


def watch_run(run_dir: Path, interval: float = 2.0, out: TextIO | None = None) -> str:
    out = out or sys.stdout
    path = Path(run_dir) / EVENTS_FILE
    reader = EventReader(path)
    summary = RunSummary(run_id=Path(run_dir).name, path=Path(run_dir))
    eta = EtaWindow()
    last_printed = None
    _skip_history(path, summary, reader, out)
    while True:
        gone = launcher_gone(Path(run_dir))  # checked before the read below
        batch = reader.read_new(CHUNK, compact=True)
        last_printed = _print_events(batch, summary, eta, last_printed, out)
        if summary.status in ("completed", "stopped", "failed"):
            break
        if reader.problem is not None:
            summary.mark_unreadable(reader.problem)
            break
        if batch and _behind(path, reader):
            continue  # a long backlog: read on before deciding anything
        if gone:  # and the read after it found no run_end
            summary.mark_died()
            break
        time.sleep(interval)
    print(f"{summary.status}: {summary.reason or ''} (step {summary.step})", file=out, flush=True)
    if summary.error:
        print(summary.error, file=out, flush=True)
    if summary.hint:
        print(f"hint: {summary.hint}", file=out, flush=True)
    return summary.status
