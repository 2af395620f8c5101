"""``ftui export RUN --out DIR``: the command's arguments and what it does (the job itself is
``ftui.ops.jobs`` over ``ftui.jobs.export`` + ``ftui.runner.export``)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rich.markup import escape

from ftui.i18n import N_, _
from ftui.jobs.export import DEFAULT_SHARD_SIZE, DTYPES, GGUF_TYPES
from ftui.rundir.paths import default_runs_root

HELP = N_("merge a run's final/ or checkpoint into a standalone model directory (safetensors, tokenizer, Modelfile; GGUF with --gguf)")


def add_parser(sub: Any) -> None:
    x = sub.add_parser("export", help=_(HELP), description=_(
        "{what}. The result loads with transformers alone (LoRA/DoRA merged; DCP and DeepSpeed checkpoints gathered). "
        "A job like training: it outlives the terminal; Ctrl-C stops it (nothing is left half-written); --detach returns at once."
    ).format(what=_(HELP)))
    x.add_argument("run", help=_("a run id (a unique prefix is enough) or a run directory"))
    x.add_argument("--checkpoint", metavar="N|final", help=_("the checkpoint at step N (default: final/, else the newest checkpoint)"))
    x.add_argument("--out", required=True, metavar="DIR", help=_("where the model goes: a new or empty directory outside every run"))
    x.add_argument("--dtype", choices=DTYPES, default="bf16", help=_("the exported weights' type (default bf16)"))
    x.add_argument("--max-shard-size", default=DEFAULT_SHARD_SIZE, metavar="SIZE",
                   help=_("largest safetensors file, e.g. 2GB, 500MB (default {size})").format(size=DEFAULT_SHARD_SIZE))
    x.add_argument("--gguf", nargs="?", const="f16", choices=GGUF_TYPES, metavar="TYPE",
                   help=_("also write a GGUF file for llama.cpp / Ollama: {types} (default f16); Llama, Mistral and Qwen2/Qwen3 language models (a vision-language model: convert the export with llama.cpp's convert_hf_to_gguf.py, --mmproj for its projector)").format(
                       types=", ".join(GGUF_TYPES)))
    x.add_argument("--force", action="store_true", help=_(
        "replace an earlier ftui export at --out (once the new export is complete): only a directory holding nothing but what "
        "that export wrote, or an empty one; anything else is refused, and a symbolic link is never followed"))
    x.add_argument("--detach", action="store_true", help=_("start it and return (follow with ftui watch DIR)"))
    x.add_argument("--root", default=None, metavar="RUNS_ROOT", help=_("runs root (default: {root})").format(root=default_runs_root()))


def cmd_export(args: argparse.Namespace) -> int:
    from ftui.cli.console import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, refusal, safe_console
    from ftui.cli.follow import follow_run
    from ftui.cli.following import wait_for_exit
    from ftui.cli.runs import resolve_run_arg
    from ftui.jobs.export import leftover_note
    from ftui.ops import jobs
    from ftui.ops.control import stop
    from ftui.ops.errors import OpError

    out, err = safe_console(), safe_console(stderr=True)
    run_dir = resolve_run_arg(args.run, args.root, err)
    if run_dir is None:
        return EXIT_USAGE
    try:
        prepared = jobs.prepare_export(run_dir, which=args.checkpoint, out=Path(args.out), dtype=args.dtype,
                                       max_shard_size=args.max_shard_size, gguf=args.gguf, force=args.force,
                                       runs_root=Path(args.root or default_runs_root()))
    except OpError as e:
        return refusal(err, e)
    out.print(escape(_("export needs {what}").format(what=prepared.needs.describe())))
    swept = jobs.sweep_beside_out(prepared)
    if swept:
        err.print(escape(swept), soft_wrap=True)
    try:
        job_dir = jobs.start_export(prepared).job_dir
    except OpError as e:
        return refusal(err, e)
    out.print(_("{job} job started in {path}").format(job="export", path=escape(str(job_dir))), soft_wrap=True)
    if args.detach:
        out.print(escape(_("follow it with: ftui watch {path}").format(path=job_dir)), soft_wrap=True)
        return EXIT_OK
    interrupts: list[int] = []

    def interrupted(count: int) -> None:
        interrupts.append(count)
        out.print("[yellow]" + _("stopping: nothing half-written is left") + "[/]" if count == 1 else "[red]" + _("killing the job") + "[/]")
        stop(job_dir, force=count > 1)

    summary = follow_run(job_dir, out, on_interrupt=interrupted)
    wait_for_exit(job_dir, out)  # the job's processes gone before the out directory is named
    if summary.status == "completed":
        result = export_result(job_dir)
        for command in result.get("commands") or []:
            out.print(f"  {escape(str(command))}", soft_wrap=True)
        out.print(escape(str(result.get("out") or args.out)), soft_wrap=True)  # the last line: the model's directory (scripts read it)
        return EXIT_OK
    left = leftover_note(job_dir)
    if left:
        err.print(escape(left), soft_wrap=True)
    return EXIT_INTERRUPTED if interrupts else EXIT_FAILED


def export_result(job_dir: Path) -> dict[str, Any]:
    """The job's ``export`` event (empty when there is none: a failed or stopped job)."""
    from ftui.rundir.event_reader import read_all
    from ftui.rundir.paths import EVENTS_FILE

    found = [e for e in read_all(job_dir / EVENTS_FILE) if e.get("event") == "export"]
    return found[-1] if found else {}
