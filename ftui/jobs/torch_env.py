"""The environment of every torch process ftui starts: a job's supervisor, launcher and ranks
(``launch.start_run``) and the chat worker. One place, so the jobs and chat cannot drift apart.
A variable the user set is kept; only these defaults are added."""

from __future__ import annotations

import os


def torch_process_env(extra: dict[str, str] | None = None, base: dict[str, str] | None = None) -> dict[str, str]:
    """``base`` (the current environment) with ``extra`` over it, plus ftui's defaults:

    - ``PYTHONUNBUFFERED=1`` (always): the ranks' lines reach train.log and the app as written;
    - ``TOKENIZERS_PARALLELISM=false``: the tokenizers' threads would be forked with the data
      loader's workers (and warn about it);
    - ``CUDA_DEVICE_ORDER=PCI_BUS_ID``: cuda:N numbered as NVML (ftui.machine.gpu) and nvidia-smi do;
    - ``OMP_WAIT_POLICY=PASSIVE``: OpenMP threads that wait for work sleep instead of spinning.
      A CPU run's intra-op threads otherwise spin at every op while a thread that shares its
      core with another busy process waits for its time slice: the demo's steps took 2.5 s
      instead of 0.06-0.07 s on a 2-core machine beside one busy process, and 0.11 s with
      passive waiting (0.08 s when idle). GPU ranks' few CPU threads are unaffected."""
    env = dict(os.environ if base is None else base)
    env.update(extra or {})
    env["PYTHONUNBUFFERED"] = "1"
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    env.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    return env
