"""The multi-node launcher: torchrun's static rendezvous at ``rdzv_endpoint``.

Node 0's address; its store stores no pickles. Global ranks follow ``node_rank``, so rank 0,
which writes the events and final/, is on node 0. DeepSpeed runs under it too (it reads the
same environment), so no hostfile or ssh between nodes is needed. Every other node joins node
0's run directory (``other_node_commands``). No torch here: torchrun's options are read from
its source file.

Signals under Slurm (torch 2.13's torch/distributed/elastic, read for issue 45): torchrun
handles SIGTERM/SIGINT/SIGHUP/SIGQUIT by raising SignalException in its main thread; the agent
then sends that signal to each rank's process group (the ranks run in sessions of their own)
and waits ``--shutdown-timeout`` seconds before SIGKILL. slurmstepd's TERM reaches torchrun
and the ranks alike, so each rank gets it twice (slurmstepd's, torchrun's) and takes the repeat
as the same Stop (ftui.rundir.rank_env.same_stop). A second TERM to torchrun while it waits
(srun's "forcing job termination", or a second ``scancel``) interrupts that wait; its
``finally`` shuts down again, so the ranks get TERM once more (within the window: still the one
Stop) and a fresh wait starts; a third ends torchrun at once and the ranks with it (PDEATHSIG),
as Slurm's SIGKILL after KillWait would anyway.
"""

from __future__ import annotations

import functools
import importlib.util
import shlex
from pathlib import Path

from ftui.config.schema import RunConfig
from ftui.rundir.paths import CONFIG_FILE


def command(cfg: RunConfig, run_dir: Path, python: str, tail: list[str]) -> list[str]:
    """The command that starts this node's ranks; ``tail``: the runner's job, run directory
    and ``--resume``. The ranks get ``stop_timeout`` seconds after a Stop where torchrun can
    be told so (``torchrun_has_shutdown_timeout``)."""
    host, _sep, port = cfg.rdzv_endpoint.rpartition(":")
    return [python, "-m", "torch.distributed.run", f"--nproc-per-node={cfg.nproc_per_node}", f"--nnodes={cfg.nnodes}",
            f"--node-rank={cfg.node_rank}", f"--master-addr={host.strip('[]')}", f"--master-port={port}",
            "--max-restarts=0", *([f"--shutdown-timeout={cfg.stop_timeout}"] if torchrun_has_shutdown_timeout() else []),
            "-m", "ftui.runner", *tail]


@functools.lru_cache(maxsize=1)
def torchrun_has_shutdown_timeout() -> bool:
    """Whether the installed torchrun takes ``--shutdown-timeout`` (torch 2.12 and later; an
    older torchrun rejects the whole command). Read from its source file, not by importing
    torch: this side of ftui never imports torch. Without it torchrun gives the ranks its
    built-in 30 s after a Stop."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return False
    run_py = Path(list(spec.submodule_search_locations)[0]) / "distributed" / "run.py"
    try:
        return "--shutdown-timeout" in run_py.read_text(errors="replace")
    except OSError:
        return False


def other_node_commands(cfg: RunConfig, run_dir: Path, resume: Path | None = None) -> list[str]:
    """What to run on each other node of a multi-node job: join this run directory (by its
    full path, which the nodes share) with the node's rank, from the same checkpoint when
    resuming, so that every node starts from the same step."""
    out = []
    run_dir = run_dir.resolve()
    for rank in range(cfg.nnodes):
        if rank == cfg.node_rank:
            continue
        if resume is None:
            out.append(f"ftui train {shlex.quote(str(run_dir / CONFIG_FILE))} --node-rank {rank}")
        else:
            step = resume.name.removeprefix("step-")
            which = step if step.isdigit() and resume.parent.parent == run_dir else str(resume)
            out.append(f"ftui train --resume {shlex.quote(str(run_dir))} --checkpoint {shlex.quote(which)} --node-rank {rank}")
    return out
