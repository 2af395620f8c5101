"""``python -m ftui.jobs.spawn --nproc-per-node N --stop-timeout S JOB RUN_DIR [--resume CKPT]``:
ftui's launcher for the ranks of a one-node job (each rank: ``python -m ftui.runner JOB RUN_DIR ...``).

It replaces torchrun on one node because torchrun's rendezvous store listens on every
interface and holds pickles any process reaching its port could overwrite (code execution as
the training user). Here nothing listens for the launch itself:

- one process: the rank is started directly and joins no process group (no socket at all;
  a one-process DeepSpeed run joins a one-rank group, see below);
- several processes: the ranks meet through a ``FileStore`` in a fresh ``0600`` file inside
  the ``0700`` run directory (no socket; only this user can read or write it), and gloo /
  NCCL are told to bind their connections between the ranks to the loopback interface.

What torchrun did for us is kept: a Stop (SIGTERM or SIGINT to this process) is passed to the
ranks once, they get ``stop_timeout`` seconds to finish the step and save a checkpoint, then
are killed; a second signal kills them at once (under Slurm, a repeat within SIGNAL_REPEAT_S
is the same Stop: ftui.rundir.rank_env.same_stop); when a rank fails the others are asked to stop
and killed 30 s later (no rank waits in a collective forever); the ranks die with
this process (they set PDEATHSIG, ftui.runner.faults.die_with_parent); the exit code is the first failing
rank's. No torch here: it starts fast and holds no GPU memory.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from ftui.i18n import _
from ftui.rundir.paths import STORE_PREFIX
from ftui.rundir.rank_env import SIGNAL_REPEAT_S, STORE_ENV, THREADS_DEFAULTED_ENV, same_stop

POLL_S = 0.2
FAILURE_GRACE_S = 30.0  # after a rank failed: time for the others to report (as torchrun gives them)


def loopback_interface() -> str:
    """The name of the loopback interface (``lo`` on Linux), for GLOO/NCCL_SOCKET_IFNAME."""
    for name, addrs in psutil.net_if_addrs().items():
        if any(getattr(a, "address", None) == "127.0.0.1" for a in addrs):
            return name
    return "lo"


def rank_environments(nproc: int, store: Path, base: dict[str, str] | None = None) -> list[dict[str, str]]:
    """Each rank's environment: torchrun's variables (ftui reads RANK, WORLD_SIZE, LOCAL_RANK,
    LOCAL_WORLD_SIZE; the supervisor finds ranks by RANK) plus the store file and loopback-only
    sockets. No MASTER_PORT: nothing is to listen for the rendezvous."""
    base = dict(os.environ if base is None else base)
    for key in ("MASTER_PORT", "TORCHELASTIC_USE_AGENT_STORE", STORE_ENV, THREADS_DEFAULTED_ENV):
        base.pop(key, None)
    if nproc > 1 and "OMP_NUM_THREADS" not in base:
        # as torchrun: one thread each (a GPU rank's CPU work), ranks that compute on the CPU set their share
        base.update({"OMP_NUM_THREADS": "1", THREADS_DEFAULTED_ENV: "1"})
    lo = loopback_interface()
    base.update({"MASTER_ADDR": "127.0.0.1", STORE_ENV: str(store), "GLOO_SOCKET_IFNAME": lo, "NCCL_SOCKET_IFNAME": lo})
    return [dict(base, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(nproc), LOCAL_WORLD_SIZE=str(nproc),
                 GROUP_RANK="0", NODE_RANK="0") for rank in range(nproc)]


def new_store_file(run_dir: Path) -> Path:
    """A fresh, empty, 0600 file in the run directory: unique per launch, so a store left by
    a killed launch is never joined."""
    fd, path = tempfile.mkstemp(prefix=STORE_PREFIX, dir=run_dir)
    os.close(fd)
    return Path(path)


class Ranks:
    """The rank processes and the rules for ending them."""

    def __init__(self, procs: list[subprocess.Popen], stop_timeout: float):
        self.procs = procs
        self.stop_timeout = stop_timeout
        self.kill_at: float | None = None  # set once the ranks were asked to stop
        self.signals = 0
        self.first_signal: float | None = None  # time.monotonic() of the first

    def on_signal(self, signum: int, _frame: object) -> None:
        now = time.monotonic()
        if same_stop(self.first_signal, now):
            # Under Slurm slurmstepd signalled the ranks too, and srun may signal again: one Stop.
            print("[ftui] " + _("launcher: signal {signal} again within {seconds} s under Slurm: the same stop").format(
                signal=signum, seconds=f"{SIGNAL_REPEAT_S:.0f}"), flush=True)
            return
        self.first_signal = self.first_signal if self.first_signal is not None else now
        self.signals += 1
        if self.signals == 1:
            print("[ftui] " + _("launcher: signal {signal}: asking the ranks to stop (killed after {seconds} s)").format(
                signal=signum, seconds=f"{self.stop_timeout:.0f}"), flush=True)
            self.ask_to_stop()
        else:
            print("[ftui] " + _("launcher: second signal: killing the ranks"), flush=True)
            self.kill()

    def ask_to_stop(self, grace: float | None = None) -> None:
        """SIGTERM to the ranks, SIGKILL after ``grace`` (``stop_timeout`` by default)."""
        kill_at = time.monotonic() + (self.stop_timeout if grace is None else grace)
        self.kill_at = kill_at if self.kill_at is None else min(self.kill_at, kill_at)
        self.send(signal.SIGTERM)

    def kill(self) -> None:
        self.kill_at = time.monotonic()
        self.send(signal.SIGKILL)

    def send(self, sig: int) -> None:
        for p in self.procs:
            if p.poll() is None:
                try:
                    p.send_signal(sig)
                except OSError:
                    pass

    def wait(self) -> int:
        """Waits for every rank; returns 0 or the first failing rank's exit code (128+signal
        for a rank killed by a signal, as a shell reports it)."""
        failed: int | None = None
        while True:
            codes = [p.poll() for p in self.procs]
            for rank, code in enumerate(codes):
                if code not in (None, 0) and failed is None:
                    failed = code if code > 0 else 128 - code
                    print("[ftui] " + _("launcher: rank {rank} exited with code {code}; stopping the other ranks").format(rank=rank, code=code),
                          flush=True)
                    # No checkpoint can be saved without it: the others only write why they end.
                    self.ask_to_stop(min(self.stop_timeout, FAILURE_GRACE_S))
            if all(c is not None for c in codes):
                return failed or 0
            if self.kill_at is not None and time.monotonic() >= self.kill_at:
                self.send(signal.SIGKILL)
            time.sleep(POLL_S)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    nproc, stop_timeout, rest = 1, 600.0, []
    for arg in argv:
        if arg.startswith("--nproc-per-node="):
            nproc = int(arg.split("=", 1)[1])
        elif arg.startswith("--stop-timeout="):
            stop_timeout = float(arg.split("=", 1)[1])
        else:
            rest.append(arg)
    if len(rest) < 2 or nproc < 1:
        print(_("usage: python -m ftui.jobs.spawn --nproc-per-node=N --stop-timeout=S JOB RUN_DIR [--resume CHECKPOINT_DIR]"),
              file=sys.stderr)
        return 2
    run_dir = Path(rest[1])
    store = new_store_file(run_dir)  # used only by ranks that join a process group
    ranks = Ranks([], stop_timeout)
    # Handlers first: a Stop that arrives while the ranks start still reaches each of them.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, ranks.on_signal)
    try:
        for env in rank_environments(nproc, store):
            # A session of its own: a signal to the launcher's group reaches a rank only through
            # the launcher, once (a second one would mean "exit at once").
            ranks.procs.append(subprocess.Popen([sys.executable, "-m", "ftui.runner", *rest], env=env,
                                                start_new_session=True))
            if ranks.signals:
                ranks.procs[-1].send_signal(signal.SIGKILL if ranks.signals > 1 else signal.SIGTERM)
        return ranks.wait()
    finally:
        ranks.kill()  # nothing outlives the launcher, whatever ended it
        store.unlink(missing_ok=True)


if __name__ == "__main__":
    sys.exit(main())
