"""Summarising a long finished run (issue 21, item 7): `ftui runs` (also what the runs screen
does every 2 s), `ftui watch` of the finished run and the supervisor's final check
(`has_run_end`), on a run with N step events (default 1,000,000, 8 ranks each: ~890 MB).

Each operation runs in a fresh interpreter: wall time and peak RSS (the interpreter with
its imports, and what the operation added). ``--tree DIR`` measures another checkout of
ftui (e.g. the code before the change) with the same file; ``--label`` names the entry in
results/run_summaries.json (entries of other labels are kept).

Usage: python bench/run_summaries.py [N] [--quick] [--tree DIR] [--label NAME] [--keep DIR]"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import RESULTS, machine  # noqa: E402
from make_events import write  # noqa: E402

OPS = {
    "ftui runs (list_runs)": "from ftui.rundir.listing import list_runs; r = list_runs(ROOT); assert r[0].status == 'completed', r[0].status",
    "ftui watch (finished run)": "import io; from ftui.cli.watch import watch_run; "
                                 "assert watch_run(RUN, interval=0.01, out=io.StringIO()) == 'completed'",
    "supervisor final check (has_run_end)": "from ftui.jobs.supervise import has_run_end; assert has_run_end(RUN)",
}

CHILD = """
import resource, sys, time
from pathlib import Path
ROOT = Path(sys.argv[1]); RUN = ROOT / "long"
import ftui, ftui.rundir.listing, ftui.cli.watch, ftui.jobs.supervise  # imports are not the operation
assert ftui.__file__.startswith(sys.argv[2]), ftui.__file__
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t0 = time.perf_counter()
{op}
dt = time.perf_counter() - t0
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(f"{{dt}} {{peak}} {{base}}")
"""


def measure(tree: Path, root: Path, op: str) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=str(tree))
    out = subprocess.run([sys.executable, "-c", CHILD.format(op=op), str(root), str(tree)], env=env, cwd=tree, capture_output=True,
                         text=True, timeout=3600, check=True).stdout.split()
    seconds, peak_kb, base_kb = float(out[0]), int(out[1]), int(out[2])
    return {"seconds": round(seconds, 3), "peak_rss_mb": round(peak_kb / 1024, 1), "added_rss_mb": round((peak_kb - base_kb) / 1024, 1)}


def make_run(root: Path, n: int) -> Path:
    run = write(root / "long", n)
    from ftui.rundir.events import make_event

    with open(run / "events.jsonl", "a") as fh:
        fh.write(json.dumps(make_event("run_end", t=1.7e9 + 3.6 * n + 40, status="completed", reason=f"{n} steps")) + "\n")
    return run


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("n", nargs="?", type=int, default=1_000_000)
    ap.add_argument("--quick", action="store_true", help="20,000 steps, nothing recorded")
    ap.add_argument("--tree", default=str(Path(__file__).resolve().parent.parent), help="the ftui checkout to measure")
    ap.add_argument("--label", default="after")
    ap.add_argument("--keep", help="make (or reuse) the run under this directory instead of a temporary one")
    args = ap.parse_args()
    n = 20_000 if args.quick else args.n
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(args.keep or tmp)
        if not (root / "long" / "events.jsonl").exists():
            make_run(root, n)
        size = (root / "long" / "events.jsonl").stat().st_size
        result = {name: measure(Path(args.tree), root, op) for name, op in OPS.items()}
    entry = {"label": args.label, "steps": n, "events_bytes": size, "results": result}
    print(json.dumps(entry, indent=1))
    if not args.quick:
        path = RESULTS / "run_summaries.json"
        old = json.loads(path.read_text()) if path.exists() else {}
        old.setdefault("runs", {})[args.label] = entry
        old["machine"] = machine()
        RESULTS.mkdir(exist_ok=True)
        path.write_text(json.dumps(old, indent=1) + "\n")


if __name__ == "__main__":
    main()
