"""Benchmark: attach the dashboard to a run with N step events (default one million).

Reports the time until the dashboard shows the run's last step (head and tail first), the
time until the whole history is in the plot, the bytes of events.jsonl, and the process's
peak RSS. Run: python bench/tui_attach.py [N] [--quick]"""

from __future__ import annotations

import asyncio
import json
import platform
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_events import write  # noqa: E402

from ftui.tui.app import FtuiApp  # noqa: E402
from ftui.tui.screens.dashboard import DashboardScreen  # noqa: E402


async def attach(run: Path, n: int) -> dict:
    app = FtuiApp(run.parent, attach=run, sampler=lambda: ([], None), offer_live=False)
    t0 = time.perf_counter()
    first = full = None
    async with app.run_test(size=(120, 36)) as pilot:
        while time.perf_counter() - t0 < 600:
            screen = app.screen
            view = getattr(screen, "view", None) if isinstance(screen, DashboardScreen) else None
            if view is not None and view.step == n and first is None:
                first = time.perf_counter() - t0
            if view is not None and view.step == n and view.loading is None and len(view.series[0]) > 0 and view.series[0][0] == 1:
                full = time.perf_counter() - t0
                break
            await pilot.pause(0.02)
    return {"first_frame_with_last_step_s": round(first, 3), "whole_history_s": round(full, 3),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}


def main() -> None:
    n = int(next((a for a in sys.argv[1:] if a.isdigit()), 1_000_000))
    quick = "--quick" in sys.argv
    with tempfile.TemporaryDirectory() as tmp:
        run = write(Path(tmp) / "runs" / "bench-run", n, world=2 if quick else 8)
        size = (run / "events.jsonl").stat().st_size
        result = asyncio.run(attach(run, n))
    result.update(step_events=n, events_bytes=size, machine=f"{platform.node()} {platform.processor() or platform.machine()}, "
                  f"{__import__('os').cpu_count()} cores", python=platform.python_version(), date=time.strftime("%Y-%m-%d"))
    print(json.dumps(result, indent=1))
    if not quick:
        out = Path(__file__).resolve().parent / "results" / "tui_attach.json"
        out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
