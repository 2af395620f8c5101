"""The rules of ``launcher: slurm`` (docs/clusters.md): what the batch script may hold and which
of the other launch fields mean something else on a cluster.

The slurm_* strings are written into a batch script (ftui.jobs.slurm_submit), so a line break in
one would add a line of the user's to the script: refused. The #SBATCH options ftui sets itself
(nodes, tasks, output, the warning signal, requeue) are refused in slurm_sbatch_lines with the
field that sets them, as is an array job (one run is one job).
"""

from __future__ import annotations

import re

from ftui.config.problems import FieldProblem
from ftui.config.schema import RunConfig
from ftui.i18n import N_, _

# Slurm's time formats (man sbatch --time): MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS
SLURM_TIME = re.compile(r"\d+(:\d+){0,2}|\d+-\d+(:\d+){0,2}|UNLIMITED|INFINITE", re.I)
STRING_FIELDS = ("slurm_partition", "slurm_account", "slurm_qos", "slurm_time", "slurm_mem_per_task", "slurm_constraint")
# options of sbatch that ftui's script sets: the short and long names, and what to use instead
OWN_OPTIONS = (
    (("-a", "--array"), N_("an array job runs the script several times; ftui runs one job per run")),
    (("-N", "--nodes"), N_("ftui sets --nodes from nnodes: set nnodes")),
    (("-n", "--ntasks", "--ntasks-per-node", "--ntasks-per-socket", "--ntasks-per-core", "--ntasks-per-gpu"),
     N_("ftui runs one task per node, which starts nproc_per_node ranks: set nproc_per_node (and nnodes)")),
    (("-o", "--output"), N_("ftui writes the job's output to RUN/slurm-<job id>.out, beside the run's other files")),
    (("--signal",), N_("ftui sets the time-limit warning from slurm_warn_s (0: none)")),
    (("--requeue", "--no-requeue"), N_("ftui sets it from slurm_requeue")),
    (("--open-mode",), N_("ftui appends, so that a requeued job keeps the output of its earlier lives")),
)


def slurm_problems(cfg: RunConfig) -> list[FieldProblem]:
    """launcher slurm's fields: their format, what the script may hold, and the launch fields
    whose meaning differs on a cluster (gpus, node_rank)."""
    if cfg.launcher != "slurm":
        return []
    out: list[FieldProblem] = []
    for name in STRING_FIELDS:
        value = getattr(cfg, name)
        if value is not None and re.search(r"[\r\n\0]", value):
            out.append(FieldProblem(name, value, _("a line break cannot be part of a Slurm option (it would add a line "
                                                   "to the batch script); write the value on one line")))
        elif name == "slurm_time" and value is not None and not SLURM_TIME.fullmatch(value.strip()):
            out.append(FieldProblem(name, value, _("not a Slurm time: use MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, "
                                                   "D-HH:MM:SS (e.g. 2-00:00:00 for two days) or UNLIMITED")))
    for line in cfg.slurm_sbatch_lines:
        problem = sbatch_line_problem(line)
        if problem:
            out.append(FieldProblem("slurm_sbatch_lines", line, problem))
            break
    if re.search(r"[%\\]", cfg.output_dir):
        out.append(FieldProblem("output_dir", cfg.output_dir, _("Slurm reads '%' and '\\' in the job's output file name "
                                                                "(RUN/slurm-%j.out): use a directory without them")))
    if cfg.gpus is not None:
        out.append(FieldProblem("gpus", cfg.gpus, _("under launcher slurm, Slurm gives each node its GPUs (this machine's "
                                                    "are not the run's): leave gpus empty and set slurm_gpus_per_node")))
    if cfg.node_rank > 0:
        out.append(FieldProblem("node_rank", cfg.node_rank, _("under launcher slurm, Slurm starts every node of the run "
                                                              "(nnodes); leave node_rank at 0")))
    gpus = cfg.slurm_gpus_per_node
    if gpus and cfg.device == "cpu":
        out.append(FieldProblem("slurm_gpus_per_node", gpus, _("a CPU run (device: cpu) uses no GPU; leave "
                                                                "slurm_gpus_per_node empty or set device: auto")))
    elif gpus and gpus < cfg.nproc_per_node:
        out.append(FieldProblem("slurm_gpus_per_node", gpus, _("{n} ranks per node need a GPU each: set "
                                                                "slurm_gpus_per_node to {n} or more, or lower "
                                                                "nproc_per_node").format(n=cfg.nproc_per_node)))
    return out


def sbatch_line(line: str) -> str:
    """An extra line as the script holds it: ``#SBATCH --exclusive`` as given, a bare option
    (``--exclusive``, ``-C a100``: what the form's field and ``--sbatch=--exclusive`` give) with
    ``#SBATCH `` before it. Anything else is returned as given, for sbatch_line_problem to refuse."""
    text = line.strip()
    return f"#SBATCH {text}" if text.startswith("-") else text


def sbatch_line_problem(line: str) -> str | None:
    """Why an extra #SBATCH line is refused (None: it is written as sbatch_line gives it)."""
    if re.search(r"[\r\n\0]", line):
        return _("one #SBATCH line per list item: a line break would add a line to the batch script")
    line = sbatch_line(line)
    if not line.startswith("#SBATCH "):
        return _("each line must be an sbatch option (e.g. --mail-type=END) or start with '#SBATCH '; other lines are not "
                 "written into the batch script")
    for token in line[len("#SBATCH "):].split():
        if token.startswith("#"):
            break  # sbatch reads the rest of the line as a comment
        name = token.split("=", 1)[0]
        for names, why in OWN_OPTIONS:
            short = [n for n in names if not n.startswith("--")]
            long = [n for n in names if n.startswith("--")]
            if (name in names or any(name.startswith(s) and not name.startswith("--") for s in short)
                    or (len(name) >= 5 and any(n.startswith(name) for n in long))):  # sbatch takes a long option's prefix
                return _("{option} cannot be one of slurm_sbatch_lines: {why}").format(option=name, why=_(why))
    return None


def skipped_machine_checks(cfg: RunConfig) -> str | None:
    """The note said when a config's checks against this machine are skipped (launcher slurm)."""
    if cfg.launcher != "slurm":
        return None
    return _("launcher slurm: the run's GPUs are on the compute nodes, so these checks against this machine were not "
             "made: the GPUs for nproc_per_node, a GPU for device cuda, fp16 or QLoRA, bf16's and FlashAttention-2's "
             "compute capability, and whether DeepSpeed, bitsandbytes and liger-kernel are installed (the ranks "
             "find out on the nodes)")
