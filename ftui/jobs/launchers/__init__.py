"""Launchers: how the ranks of a run are started on a node, one module each.

A launcher module has ``command(cfg, run_dir, python, tail)``, the exact command that starts
this node's ranks (``tail``: the runner's job, run directory and ``--resume``), and
``other_node_commands(cfg, run_dir, resume)``, what to run on each other node (empty where
one node is the whole run). ``launcher_for`` picks one, in this one place: ``local``
(``ftui.jobs.spawn``) for one node, ``torchrun`` (static rendezvous) for several. A new
launcher (Slurm, issue 45) is one module here and one line in ``launcher_for``. No torch here.
"""

from __future__ import annotations

from types import ModuleType

from ftui.config.schema import RunConfig
from ftui.jobs.launchers import local, torchrun


def launcher_for(cfg: RunConfig) -> ModuleType:
    """The launcher module that starts ``cfg``'s ranks."""
    return local if cfg.nnodes == 1 else torchrun
