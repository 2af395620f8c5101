"""``ftui watch RUN``: plain progress lines for terminals without a TTY
(``ssh host ftui watch RUN`` without ``-t``, CI logs, ``| tee``). No colours, no cursor
movement: one line per new step event (at most one per interval), then the final status."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TextIO

from ftui.events import EVENTS_FILE, EventReader
from ftui.follow import EtaWindow, fmt_duration, fmt_prepare
from ftui.runs import RunSummary, launcher_gone, read_launch_info


def _print_events(events, summary: RunSummary, eta: EtaWindow, last_printed, out: TextIO):
    """Prints what a batch of events says; returns the step last printed."""
    latest = None
    for e in events:
        summary.apply(e)
        if e["event"] == "step":
            eta.add(e["t"], e["step"])
            latest = e
        elif e["event"] == "run_start":
            print(f"{summary.run_id}: {e['model']} {e['method']} {e['engine']} {e['precision']} "
                  f"world_size={e['world_size']} max_steps={e['max_steps']}", file=out, flush=True)
        elif e["event"] == "eval":
            print(f"step {e['step']} eval_loss {e['eval_loss']:.4f}", file=out, flush=True)
        elif e["event"] == "log" and e.get("level") in ("warning", "error"):
            print(f"{e['level']}: {e['message']}", file=out, flush=True)
        elif e["event"] == "prepare":
            print(fmt_prepare(e), file=out, flush=True)
    if latest is not None and latest["step"] != last_printed:
        last_printed = latest["step"]
        loss = "nan" if latest.get("loss") is None else f"{latest['loss']:.4f}"
        print(f"step {latest['step']}/{summary.max_steps or '?'} loss {loss} "
              f"lr {latest.get('lr', 0):.3e} tok/s {latest.get('tokens_per_s', 0):,.0f} "
              f"eta {fmt_duration(eta.eta(latest['step'], summary.max_steps))}", file=out, flush=True)
    return last_printed


def watch_run(run_dir: Path, interval: float = 2.0, out: TextIO | None = None) -> str:
    out = out or sys.stdout
    reader = EventReader(Path(run_dir) / EVENTS_FILE)
    summary = RunSummary(run_id=Path(run_dir).name, path=Path(run_dir))
    eta = EtaWindow()
    last_printed = None
    while True:
        gone = launcher_gone(read_launch_info(Path(run_dir)))  # checked before the read below
        last_printed = _print_events(reader.read_new(), summary, eta, last_printed, out)
        if summary.status in ("completed", "stopped", "failed"):
            break
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
