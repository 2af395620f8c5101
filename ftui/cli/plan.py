"""``ftui plan CONFIG``: will it fit? The per-GPU memory estimate and what would fit."""

from __future__ import annotations

import argparse

from rich.markup import escape
from rich.table import Table

from ftui.cli.console import EXIT_FAILED, EXIT_OK, EXIT_USAGE, error_line, note_line, safe_console
from ftui.cli.train import load_train_config
from ftui.i18n import N_, _

# the plan's rows: the estimate's attribute, its label (translated where shown)
PLAN_PARTS = (("weights", N_("weights")), ("gradients", N_("gradients")), ("optimizer", N_("optimizer")),
              ("activations", N_("activations")))


def cmd_plan(args: argparse.Namespace) -> int:
    """Exit 0 when it fits (or there is no GPU to compare with), 1 when it does not, 2 on bad input."""
    from ftui.plan.model_shape import UnknownModel
    from ftui.plan.planner import GIB, SLACK, count, gib
    from ftui.plan.verdict import plan

    out, err = safe_console(), safe_console(stderr=True)
    args.node_rank = args.runs_root = None
    from contextlib import nullcontext

    from ftui.machine.facts import for_another_machine

    # --gpu-memory: planned for GPUs that need not be here (a login node): this machine's GPUs
    # and packages do not decide what is valid
    with for_another_machine() if args.gpu_memory else nullcontext():
        cfg = load_train_config(args, err, data_needed=not args.gpu_memory)  # --gpu-memory: the data may be elsewhere
    if cfg is None:
        return EXIT_USAGE
    try:
        verdict = plan(cfg, int(args.gpu_memory * GIB) if args.gpu_memory else None)
    except (UnknownModel, ValueError) as e:
        err.print(error_line(str(e)))
        return EXIT_USAGE
    e = verdict.estimate
    out.print(escape(_("{model}: {params} parameters, {trainable} trainable ({method}, {precision}, engine {engine}, "
                       "{world_size} process(es), micro batch {batch} x {cutoff_len} tokens{checkpointing})").format(
        model=cfg.model_name_or_path, params=count(e.params), trainable=count(e.trainable), method=cfg.method,
        precision=cfg.precision_label, engine=cfg.engine_name, world_size=cfg.world_size, batch=cfg.per_device_train_batch_size,
        cutoff_len=cfg.cutoff_len, checkpointing=_(", gradient checkpointing") if cfg.gradient_checkpointing else "")))
    on_cpu = cfg.device == "cpu" and not args.gpu_memory  # host memory per process: no CUDA context, NCCL, GPU
    table = Table(show_header=True, box=None, pad_edge=False)
    table.add_column(_("per process (host memory)") if on_cpu else _("per GPU"))
    table.add_column(_("estimate"), justify="right")
    for name, label in PLAN_PARTS:
        table.add_row(_(label), gib(getattr(e, name)))
    overlap = _(" (gradients replace activations in backward)") if e.gradients_overlap_activations else ""
    table.add_row("[bold]" + _("peak") + "[/]" + overlap, f"[bold]{gib(e.total)}[/]")
    if not on_cpu:
        table.add_row(escape(e.overhead.describe()), gib(e.overhead.total))
        table.add_row(_("needed (peak x {slack} for the allocator + the above)").format(slack=SLACK), gib(e.needed))
    if e.host_bytes:
        table.add_row(_("host memory (offload)"), gib(e.host_bytes))
    out.print(table)
    for note in e.notes:
        out.print(note_line(note))
    if on_cpu:
        out.print(_("a CPU run (device: cpu): nothing to compare with a GPU"))
        return EXIT_OK
    if verdict.fits is None:
        out.print(_("no GPU seen (give --gpu-memory GIB to compare)"))
        return EXIT_OK
    if verdict.fits:
        out.print(_("{fits} {size} GPUs").format(fits="[green]" + _("fits") + "[/]", size=gib(verdict.gpu_bytes)))
        return EXIT_OK
    out.print(_("{fits} {size} GPUs").format(fits="[red]" + _("does not fit") + "[/]", size=gib(verdict.gpu_bytes)))
    for s in verdict.suggestions:
        out.print("  " + _("try {suggestion}").format(suggestion=escape(s)))
    if not verdict.suggestions:
        out.print("  " + _("nothing ftui offers makes it fit: more or larger GPUs"))
    return EXIT_FAILED

