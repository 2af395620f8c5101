"""The one-node launcher: ftui's own ``ftui.jobs.spawn``.

It opens no port: the ranks meet through a file in the 0700 run directory and talk over
loopback only. torchrun's single-node rendezvous would listen on every interface and hold
pickles another user could replace (code execution as you). No torch here.
"""

from __future__ import annotations

from pathlib import Path

from ftui.config.schema import RunConfig


def command(cfg: RunConfig, run_dir: Path, python: str, tail: list[str]) -> list[str]:
    """The command that starts this node's ranks; ``tail``: the runner's job, run directory
    and ``--resume``. The ranks get ``stop_timeout`` seconds to save a checkpoint after a Stop."""
    return [python, "-m", "ftui.jobs.spawn", f"--nproc-per-node={cfg.nproc_per_node}", f"--stop-timeout={cfg.stop_timeout}", *tail]


def other_node_commands(cfg: RunConfig, run_dir: Path, resume: Path | None = None) -> list[str]:
    """None: one node is the whole run."""
    return []
