"""``ftui train``'s Slurm flags (docs/clusters.md): ``--slurm`` (launcher: slurm), ``--dry-run``
and one flag per slurm_* key, each setting its config key as ``--set KEY=VALUE`` would."""

from __future__ import annotations

import argparse
from typing import Any

from ftui.i18n import N_, _

# flag, its config key, metavar and help; the values go into the config as given (its schema and rules check them)
FLAGS = (
    ("--nodes", "nnodes", "N", N_("nodes the run uses (nnodes; Slurm's --nodes)")),
    ("--partition", "slurm_partition", "NAME", N_("Slurm partition (slurm_partition)")),
    ("--account", "slurm_account", "NAME", N_("Slurm account charged (slurm_account)")),
    ("--qos", "slurm_qos", "NAME", N_("Slurm quality of service (slurm_qos)")),
    ("--time", "slurm_time", "LIMIT", N_("time limit in Slurm's format, e.g. 4:00:00 or 2-00:00:00 (slurm_time); "
                                         "the run saves a checkpoint and requeues itself before it")),
    ("--gpus-per-node", "slurm_gpus_per_node", "N", N_("GPUs per node (slurm_gpus_per_node; default: nproc_per_node, "
                                                      "none for device cpu)")),
    ("--cpus-per-task", "slurm_cpus_per_task", "N", N_("CPUs of each node's task (slurm_cpus_per_task)")),
    ("--mem", "slurm_mem_per_task", "SIZE", N_("memory of each node's task, e.g. 64G (slurm_mem_per_task)")),
    ("--constraint", "slurm_constraint", "FEATURES", N_("node features required (slurm_constraint)")),
)
NUMBERS = {"nnodes", "slurm_gpus_per_node", "slurm_cpus_per_task"}


def add_slurm_flags(t: argparse.ArgumentParser) -> None:
    """The Slurm flags of ``ftui train``."""
    g = t.add_argument_group(_("Slurm (launcher: slurm; docs/clusters.md)"))
    g.add_argument("--slurm", action="store_true", help=_("submit the run to the Slurm cluster with sbatch (launcher: slurm)"))
    g.add_argument("--dry-run", action="store_true", help=_("print the batch script that would be submitted, with the run "
                                                             "directory it would get, and create nothing"))
    for flag, key, metavar, what in FLAGS:
        g.add_argument(flag, dest=key, metavar=metavar, help=_(what), default=None, type=int if key in NUMBERS else str)
    g.add_argument("--sbatch", dest="slurm_sbatch_lines", action="append", metavar="LINE",
                   help=_("one more sbatch option for the script, e.g. --sbatch=--mail-type=END (repeatable; slurm_sbatch_lines)"))


def slurm_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The config keys the Slurm flags set (none given: {})."""
    out: dict[str, Any] = {}
    if getattr(args, "slurm", False):
        out["launcher"] = "slurm"
    for _flag, key, _metavar, _what in FLAGS:
        value = getattr(args, key, None)
        if value is not None:
            out[key] = value
    if getattr(args, "slurm_sbatch_lines", None):
        out["slurm_sbatch_lines"] = list(args.slurm_sbatch_lines)
    return out
