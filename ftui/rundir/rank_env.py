"""What the one-node launcher (ftui.jobs.spawn) tells each rank through its environment, named
once for both sides: the launcher sets these, the runner (ftui.runner.distributed) reads them,
and neither imports the other; and the one rule both apply to a repeated stop signal under Slurm
(``same_stop``). No torch here.
"""

import os
from typing import Mapping

STORE_ENV = "FTUI_STORE"  # the file ranks meet through when they join a group (engines.process_group)
# Set beside OMP_NUM_THREADS=1 when that is the launcher's default, not the user's: a rank that
# computes on the CPU then takes its share of the cores (ftui.runner.distributed.cpu_threads)
THREADS_DEFAULTED_ENV = "FTUI_OMP_DEFAULTED"

# Signals under Slurm (issue 45): slurmstepd sends SIGTERM to every process of a job step, the
# ranks included (they run in sessions of their own, which does not hide them from it), and the
# launcher (ftui.jobs.spawn, torchrun) forwards the TERM it got too; a plain scancel or a time
# limit has srun send a second TERM on top. So a rank under Slurm sees two or three TERMs for one
# Stop. A repeat within SIGNAL_REPEAT_S of the first is that same Stop; a later one keeps its
# meaning (exit / kill at once). Outside Slurm nothing changes: a second signal is a second Stop.
SLURM_JOB_ENV = "SLURM_JOB_ID"
SIGNAL_REPEAT_S = 10.0


def same_stop(first_at: float | None, now: float, environ: "Mapping[str, str] | None" = None) -> bool:
    """Whether a SIGTERM/SIGINT at ``now`` (time.monotonic) repeats the Stop first received at
    ``first_at`` (None: this is the first) and is to be ignored: only under Slurm
    (SLURM_JOB_ID in ``environ``, the process's environment by default) and within
    SIGNAL_REPEAT_S of the first."""
    env = os.environ if environ is None else environ
    return first_at is not None and SLURM_JOB_ENV in env and 0 <= now - first_at < SIGNAL_REPEAT_S
