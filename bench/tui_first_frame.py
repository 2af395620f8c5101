"""Benchmark: time from process start to the first painted frame of `ftui` (the launch
form), measured in a fresh interpreter each time (imports included: ftui.cli.main's, as the `ftui`
command pays them, then the app's), median of 7 runs.

Run: python bench/tui_first_frame.py [--quick]"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PROBE = r"""
import time
import ftui.cli.main  # the `ftui` command imports it before it opens the app
from ftui.tui.app import FtuiApp

from ftui.tui.screens.launch import LaunchScreen

class Probe(FtuiApp):
    seen = False

    def _display(self, screen, renderable):
        # The first composited frame of the launch form: what a terminal would paint.
        super()._display(screen, renderable)
        if renderable is not None and isinstance(screen, LaunchScreen) and not self.seen:
            self.seen = True
            open("first_frame.txt", "w").write(str(time.time()))  # stdout belongs to the app
            self.set_timer(0.5, self.exit)

Probe("runs", offer_live=False).run(headless=True, size=(80, 24))
"""


def measure() -> float:
    with tempfile.TemporaryDirectory() as tmp:
        # Timed from the parent: the kernel's process start time has whole-second resolution.
        start = time.time()
        subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, cwd=tmp, timeout=60, check=True)
        return float((Path(tmp) / "first_frame.txt").read_text()) - start


def main() -> None:
    quick = "--quick" in sys.argv
    times = [measure() for _ in range(2 if quick else 7)]
    result = {
        "first_frame_s_median": round(statistics.median(times), 3), "runs": [round(t, 3) for t in times],
        "machine": f"{platform.node()} {platform.machine()}, {os.cpu_count()} cores", "python": platform.python_version(),
        "date": time.strftime("%Y-%m-%d"),
    }
    print(json.dumps(result, indent=1))
    if not quick:
        (Path(__file__).resolve().parent / "results" / "tui_first_frame.json").write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
