"""Benchmark: CPU cost of the dashboard while it watches a live run.

Starts the built-in demo as a real detached run, attaches the dashboard (in this process,
headless) for a fixed window and reports this process's CPU time over wall time: the cost
of tailing events and train.log, sampling devices and redrawing. Training runs in other
processes and is not counted. Run: python bench/tui_watch_cpu.py [seconds] [--quick]"""

from __future__ import annotations

import asyncio
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

from ftui.config.load import demo_config
from ftui.jobs.launch import prepare_run, start_run, stop_run
from ftui.tui.app import FtuiApp


async def watch(run: Path, seconds: float) -> dict:
    app = FtuiApp(run.parent, attach=run, offer_live=False)
    async with app.run_test(size=(120, 36)) as pilot:
        while getattr(app.screen, "view", None) is None or app.screen.view.step < 2:
            await pilot.pause(0.2)
        c0, w0, s0 = time.process_time(), time.perf_counter(), app.screen.view.step
        await pilot.pause(seconds)
        c1, w1, s1 = time.process_time(), time.perf_counter(), app.screen.view.step
    return {"window_s": round(w1 - w0, 1), "cpu_s": round(c1 - c0, 3), "cpu_percent_of_one_core": round(100 * (c1 - c0) / (w1 - w0), 2),
            "steps_seen_in_window": s1 - s0}


def main() -> None:
    quick = "--quick" in sys.argv
    seconds = float(next((a for a in sys.argv[1:] if a.replace(".", "").isdigit()), 5 if quick else 20))
    results = []
    for logging_steps in ((1,) if quick else (1, 10)):
        results.append(measure(seconds, logging_steps))
    print(json.dumps(results, indent=1))
    if not quick:
        (Path(__file__).resolve().parent / "results" / "tui_watch_cpu.json").write_text(json.dumps(results, indent=1) + "\n")


def measure(seconds: float, logging_steps: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        cfg = demo_config(output_dir=str(Path(tmp) / "runs"), max_steps=100000, max_samples=32, logging_steps=logging_steps)
        run = prepare_run(cfg)
        start_run(run, cfg)
        try:
            result = asyncio.run(watch(run, seconds))
        finally:
            stop_run(run, force=True)
    result.update(logging_steps=logging_steps, machine=f"{platform.node()} {platform.machine()}, {os.cpu_count()} cores",
                  python=platform.python_version(), date=time.strftime("%Y-%m-%d"),
                  note="the demo takes ~50 ms a step: logging every step is far more events than a real run writes")
    return result


if __name__ == "__main__":
    main()
