"""``python -m ftui.jobs.supervise RUN_DIR [--node-rank N] -- COMMAND...``: run the launcher,
make sure the run's events end with ``run_end``.

Stop signals go to the process group this supervisor leads (it and the launcher,
ftui.jobs.spawn or torchrun on several nodes): the supervisor ignores SIGTERM and SIGINT and
keeps waiting, the launcher passes the signal to the ranks once.

Rank 0 writes run_end itself when training ends or fails in Python. When a rank is killed
(-9, the OOM killer) or the launcher fails before rank 0 starts, nobody would; the supervisor
then writes ``run_end`` status ``failed`` with the launcher's exit code and the last lines
of train.log, so ``ftui runs`` and the dashboard tell the truth. No torch here.

On a full disk the final record still fits: the supervisor fills ``.run-end-reserve`` beside
events.jsonl at start, and whoever writes ``run_end`` into a full disk frees it first. A
disk too full for even that ends the run before it starts, saying so.

On node K > 0 of a multi-node run, RUN_DIR is the node's own directory in node 0's run
(``RUN/nodes/node-K``): no rank writes events there, so the supervisor records how each of
the node's jobs ended.

It also watches for a hung job: every rank touches ``heartbeat/rank-N`` as it makes
progress; when none has for ``hang_timeout`` seconds, the supervisor names the rank (a
stopped process, else the one that fell behind), kills the tree and records the hang. Every
node's ranks beat in the run directory's ``heartbeat/``, and every node's supervisor watches
it: node K ends its own ranks too (a stopped rank there, or node 0 gone), counting only beats
made since it started (a resumed run's old beats are node 0's to clear).
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from ftui.rundir.event_reader import last_lifecycle_event
from ftui.rundir.event_writer import DISK_FULL_ERRNOS, DISK_FULL_TEXT, EventWriter, make_reserve, release_reserve, RESERVE_BYTES
from ftui.rundir.paths import EVENTS_FILE
from ftui.i18n import N_, _
from ftui.rundir.paths import CONFIG_FILE, HEARTBEAT_DIR, LOG_FILE, STOP_FILE
from ftui.rundir.summary import STOPPED_EARLY_REASON

POLL_S = 2.0
# the run's end is written in the language the run was started in (FTUI_LANG, inherited)
DISK_FULL_HINT = N_("the disk is full where the run directory is: free space (or raise the quota), then start again "
                    "(ftui train --resume RUN continues from the newest checkpoint, if any); train.log may be empty or "
                    "cut short because it could not be written either")


def say(message: str) -> None:
    """A line for train.log, which is on the same disk: a full disk must not end the supervisor."""
    try:
        print(message, flush=True)
    except OSError:
        pass


def free_bytes(run_dir: Path) -> int | None:
    try:
        return shutil.disk_usage(run_dir).free
    except OSError:
        return None


def looks_disk_full(run_dir: Path, log_tail: str) -> bool:
    """The ranks died of a full disk: their log says so, or there is no room left at all."""
    free = free_bytes(run_dir)
    return any(t in log_tail for t in DISK_FULL_TEXT) or (free is not None and free < RESERVE_BYTES)


def write_run_end(run_dir: Path, **fields) -> None:
    """Writes the supervisor's run_end; on a full disk it takes the reserve's room (EventWriter)."""
    try:
        with EventWriter(run_dir / EVENTS_FILE) as writer:
            writer.write("run_end", **fields)
    except OSError as err:
        say("[ftui] " + _("could not record how the run ended: {reason}").format(reason=err))


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
    """Whether this job's ranks wrote run_end: it is the last record of the file, so only the
    tail is read (a million-step run is not parsed again), and a resumed run's earlier
    run_end does not count (a run_start follows it)."""
    return last_lifecycle_event(run_dir / EVENTS_FILE) == "run_end"


def read_hang_timeout(run_dir: Path) -> int:
    try:
        from ftui.config.load import read_run_config

        return read_run_config(run_dir / CONFIG_FILE).hang_timeout  # its schema only: no GPU or model check
    except Exception:  # a config the runner cannot read fails there, with a message
        return 0


def rank_processes(launcher: subprocess.Popen) -> dict[int, psutil.Process]:
    """The launcher's descendants that are ranks, by their RANK environment variable."""
    out: dict[int, psutil.Process] = {}
    try:
        children = psutil.Process(launcher.pid).children(recursive=True)
    except psutil.Error:
        return out
    for child in children:
        try:
            rank = child.environ().get("RANK")
        except psutil.Error:
            continue
        if rank is not None and rank.isdigit():
            out.setdefault(int(rank), child)
    return out


def find_hang(run_dir: Path, timeout: int, launcher: subprocess.Popen, now: float | None = None,
              since: float | None = None) -> str | None:
    """A message naming the hung rank when no rank has made progress for ``timeout`` seconds
    (``since``: beats older than this are not counted, nor is a hang armed by them)."""
    beats: dict[int, float] = {}
    try:
        for f in (run_dir / HEARTBEAT_DIR).iterdir():
            if f.name.startswith("rank-") and f.name[5:].isdigit():
                beats[int(f.name[5:])] = f.stat().st_mtime
    except OSError:
        return None
    if since is not None:
        beats = {rank: t for rank, t in beats.items() if t >= since}
    if not beats:
        return None  # not armed before the first step
    now = time.time() if now is None else now
    idle = now - max(beats.values())
    if idle < timeout:
        return None
    procs = rank_processes(launcher)
    stopped = sorted(r for r, p in procs.items() if _status(p) == psutil.STATUS_STOPPED)
    if stopped:
        who = ", ".join(_("rank {rank}").format(rank=r) for r in stopped)
        why = _("its process is stopped (SIGSTOP, Ctrl-Z or a debugger)") if len(stopped) == 1 else _("their processes are stopped")
    else:
        oldest = min(beats.values())
        late = sorted(r for r, t in beats.items() if t - oldest < 1.0)
        if len(late) == len(beats) and len(beats) > 1:
            who, why = _("every rank"), _("all waiting (a stuck collective, GPU or filesystem)")
        else:
            who, why = ", ".join(_("rank {rank}").format(rank=r) for r in late), _("last to make progress")
    return _("{who} made no progress for {seconds} s ({why}); ftui ended the job after hang_timeout={timeout} s").format(
        who=who, seconds=f"{idle:.0f}", why=why, timeout=timeout)


def _status(p: psutil.Process) -> str | None:
    try:
        return p.status()
    except psutil.Error:
        return None


def kill_tree(launcher: subprocess.Popen) -> None:
    """SIGKILL the launcher and every descendant (ranks run in sessions of their own)."""
    try:
        procs = psutil.Process(launcher.pid).children(recursive=True)
    except psutil.Error:
        procs = []
    for p in procs:
        try:
            p.kill()  # a stopped process dies from SIGKILL too
        except psutil.Error:
            pass
    launcher.kill()


def wait_watching(proc: subprocess.Popen, run_dir: Path, since: float | None = None) -> tuple[int, str | None]:
    """Waits for the launcher; ends a hung job. Returns (exit code, hang message or None).
    ``run_dir``: the run's directory (its config and its ranks' heartbeats)."""
    timeout = read_hang_timeout(run_dir)
    while True:
        try:
            return proc.wait(timeout=POLL_S if timeout > 0 else None), None
        except subprocess.TimeoutExpired:
            hang = find_hang(run_dir, timeout, proc, since=since)
            if hang is not None:
                say(f"[ftui] {hang}")
                kill_tree(proc)
                return proc.wait(), hang
        except InterruptedError:
            continue


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    node_rank = 0
    if len(argv) >= 3 and argv[1] == "--node-rank":
        node_rank = int(argv[2])
        argv = [argv[0], *argv[3:]]
    if len(argv) < 3 or argv[1] != "--":
        print(_("usage: python -m ftui.jobs.supervise RUN_DIR [--node-rank N] -- COMMAND..."), file=sys.stderr)
        return 2
    run_dir, cmd = Path(argv[0]), argv[2:]
    if hasattr(signal, "SIGXFSZ"):  # a file-size limit (ulimit -f) fails a write with EFBIG instead of killing us
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    started = time.time()
    shutil.rmtree(run_dir / HEARTBEAT_DIR, ignore_errors=True)  # a resumed run starts unarmed (node 0's directory)
    if not reserve_room(run_dir):
        return 1
    proc = subprocess.Popen(cmd)
    # The group's SIGTERM reaches the launcher directly; forwarding it too would be a second
    # signal, which means "exit at once". (A Stop before this point ends the supervisor
    # itself, and the launcher with it: the run reads `stopped` from stop_requested.)
    signal.signal(signal.SIGTERM, lambda s, f: None)
    signal.signal(signal.SIGINT, lambda s, f: None)
    # node K's records are in RUN/nodes/node-K; its ranks beat in RUN/heartbeat with node 0's
    run_root = run_dir.parent.parent if node_rank > 0 else run_dir
    code, hang = wait_watching(proc, run_root, since=started if node_rank > 0 else None)
    if hang is not None and not has_run_end(run_dir):
        write_run_end(run_dir, status="failed", reason=hang, error_type="Hang", error_message=hang,
                      hint=_("if steps, evals or checkpoint saves really take this long, raise hang_timeout (0 turns the "
                             "check off); the newest checkpoint resumes with ftui train --resume RUN"), exit_code=code)
        return finish(run_dir, code)
    if node_rank > 0:
        # Rank 0 (on node 0) writes the run's events; this node's directory (RUN/nodes/node-K)
        # only records how each of its jobs ended, one run_end per job (no rank writes here).
        write_run_end(run_dir, status="completed" if code == 0 else "failed",
                      reason=_("node {node} of a multi-node run: its ranks exited with code {code}; "
                               "the run's events and final/ are on node 0").format(node=node_rank, code=code),
                      **({} if code == 0 else {"error_type": "ProcessDied", "error_message": last_log_lines(run_dir)[-2000:],
                                               "hint": _("see train.log on this node and the run on node 0")}))
        return finish(run_dir, code)
    if not has_run_end(run_dir) and (run_dir / STOP_FILE).exists():
        # Stop reached the ranks before they could handle it (during start-up): a stop, not a crash.
        write_run_end(run_dir, status="stopped", reason=STOPPED_EARLY_REASON, exit_code=code)
    if not has_run_end(run_dir):
        tail = last_log_lines(run_dir)
        if looks_disk_full(run_dir, tail):
            write_run_end(run_dir, status="failed", reason=_("disk full: the training processes could not write (launcher exit code {code})").format(code=code),
                          error_type="DiskFull", error_message=tail[-2000:], hint=_(DISK_FULL_HINT), exit_code=code)
        else:
            write_run_end(run_dir, status="failed", reason=_("the training processes ended without a result (launcher exit code {code})").format(code=code),
                          error_type="ProcessDied", error_message=tail[-2000:],
                          hint=_("a rank was killed (out of host memory? kill -9?) or crashed before Python could report it; see train.log"),
                          exit_code=code)
    return finish(run_dir, code)


def finish(run_dir: Path, code: int) -> int:
    release_reserve(run_dir)
    say("[ftui] " + _("launcher exited with code {code}").format(code=code))
    return code


def reserve_room(run_dir: Path) -> bool:
    """Keeps room for run_end. False (and the run ended, saying why) when the disk is full already."""
    try:
        make_reserve(run_dir)
    except OSError as err:
        if err.errno not in DISK_FULL_ERRNOS:
            return True  # no reserve, but no reason not to try either
        free = free_bytes(run_dir)
        room = _("{size} KiB free").format(size=free // 1024) if free is not None else _("no room")
        write_run_end(run_dir, status="failed", reason=_("disk full before the start: {room} where the run directory is").format(room=room),
                      error_type="DiskFull", error_message=str(err), hint=_(DISK_FULL_HINT))
        say("[ftui] " + _("not started: the disk is full ({room} in {path})").format(room=room, path=run_dir))
        return False
    return True


if __name__ == "__main__":
    sys.exit(main())
