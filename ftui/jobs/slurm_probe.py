"""The shared-filesystem probe a submit runs on one compute node before ``sbatch``:

    srun --nodes=1 --ntasks=1 ... PYTHON -m ftui.jobs.slurm_probe RUN_DIR NONCE

writes ``RUN_DIR/.slurm-probe-NONCE`` on the node; the submitting side (ftui.jobs.slurm_submit)
reads it back and removes it. The file there proves both that the run directory is on a
filesystem the nodes share (every node writes its part of each checkpoint into it, and the
dashboard on the login node follows the run through it) and that ftui's Python runs on the
node. Torch-free and quick: it imports nothing of ftui's beyond the file names and its messages.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from pathlib import Path

from ftui.i18n import _
from ftui.rundir.paths import SLURM_PROBE_PREFIX

EXIT_NOT_WRITTEN = 3  # the probe ran but could not write into the run directory (not there on this node)


def probe_path(run_dir: Path, nonce: str) -> Path:
    return Path(run_dir) / f"{SLURM_PROBE_PREFIX}{nonce}"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2 or not args[1].isalnum():
        print(_("usage: python -m ftui.jobs.slurm_probe RUN_DIR NONCE"), file=sys.stderr)
        return 2
    run_dir, nonce = Path(args[0]), args[1]
    record = {"nonce": nonce, "host": socket.gethostname(), "cluster": os.environ.get("SLURM_CLUSTER_NAME"),
              "job_id": os.environ.get("SLURM_JOB_ID")}
    try:
        # O_EXCL into an existing directory only: a node that does not share it must not make one
        fd = os.open(probe_path(run_dir, nonce), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(json.dumps(record))
    except OSError as e:
        print(_("ftui's probe on {host} cannot write into {path}: {reason}").format(host=record["host"], path=run_dir,
                                                                                   reason=e.strerror or e), file=sys.stderr)
        return EXIT_NOT_WRITTEN
    return 0


if __name__ == "__main__":
    sys.exit(main())
