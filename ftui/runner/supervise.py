"""``python -m ftui.runner.supervise RUN_DIR [--node-rank N] -- COMMAND...``: run the launcher,
make sure the run's events end with ``run_end``.

Stop signals go to the process group this supervisor leads (it and torchrun): the supervisor
ignores SIGTERM and SIGINT and keeps waiting, torchrun passes the signal to the ranks once.

Rank 0 writes run_end itself when training ends or fails in Python. When a rank is killed
(-9, the OOM killer) or torchrun fails before rank 0 starts, nobody would; the supervisor
then writes ``run_end`` status ``failed`` with the launcher's exit code and the last lines
of train.log, so ``ftui runs`` and the dashboard tell the truth. No torch here.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from ftui.events import EVENTS_FILE, EventReader, EventWriter
from ftui.runs import LOG_FILE


def last_log_lines(run_dir: Path, n: int = 8) -> str:
    try:
        with open(run_dir / LOG_FILE, "rb") as fh:
            fh.seek(0, 2)
            size = fh.tell()
            fh.seek(max(0, size - 8192))
            tail = fh.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return ""
    return "\n".join(tail[-n:])


def has_run_end(run_dir: Path) -> bool:
    return any(e["event"] == "run_end" for e in EventReader(run_dir / EVENTS_FILE).read_new())


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    node_rank = 0
    if len(argv) >= 3 and argv[1] == "--node-rank":
        node_rank = int(argv[2])
        argv = [argv[0], *argv[3:]]
    if len(argv) < 3 or argv[1] != "--":
        print("usage: python -m ftui.runner.supervise RUN_DIR [--node-rank N] -- COMMAND...", file=sys.stderr)
        return 2
    run_dir, cmd = Path(argv[0]), argv[2:]
    proc = subprocess.Popen(cmd)
    # The group's SIGTERM reaches torchrun directly; forwarding it too would be a second
    # signal, which means "exit at once".
    signal.signal(signal.SIGTERM, lambda s, f: None)
    signal.signal(signal.SIGINT, lambda s, f: None)
    while True:
        try:
            code = proc.wait()
            break
        except InterruptedError:
            continue
    if node_rank > 0:
        # Rank 0 (on node 0) writes this run's events; this node only records how it ended.
        if not has_run_end(run_dir):
            with EventWriter(run_dir / EVENTS_FILE) as writer:
                writer.write("run_end", status="completed" if code == 0 else "failed",
                             reason=f"node {node_rank} of a multi-node run: its ranks exited with code {code}; "
                                    "the run's events and final/ are on node 0",
                             **({} if code == 0 else {"error_type": "ProcessDied", "error_message": last_log_lines(run_dir)[-2000:],
                                                      "hint": "see train.log on this node and the run on node 0"}))
        print(f"[ftui] launcher exited with code {code}", flush=True)
        return code
    if not has_run_end(run_dir):
        tail = last_log_lines(run_dir)
        with EventWriter(run_dir / EVENTS_FILE) as writer:
            writer.write(
                "run_end", status="failed",
                reason=f"the training processes ended without a result (launcher exit code {code})",
                error_type="ProcessDied", error_message=tail[-2000:],
                hint="a rank was killed (out of host memory? kill -9?) or crashed before Python could report it; see train.log",
                exit_code=code,
            )
    print(f"[ftui] launcher exited with code {code}", flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
