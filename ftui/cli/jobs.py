"""``ftui predict`` and ``ftui eval``: read the arguments, start the job through the
operations layer (ftui.ops.jobs), follow it."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Callable

from rich.markup import escape

from ftui.cli.console import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, error_line, refusal, safe_console
from ftui.cli.following import JOB_INTERRUPTS, follow_job
from ftui.cli.options import sampling_ok
from ftui.cli.runs import resolve_run_arg
from ftui.i18n import _
from ftui.ops.errors import OpError
from ftui.rundir.paths import default_runs_root


def cmd_offline_job(args: argparse.Namespace, follow: Callable[..., tuple[Any, bool]] = follow_job) -> int:
    """ftui predict / ftui eval: prepare the job's directory, start it detached, follow it
    (``follow``: how; main passes its own)."""
    from ftui.config.problems import ConfigError
    from ftui.config.load import parse_config
    from ftui.ops.jobs import start_offline_job

    out, err = safe_console(), safe_console(stderr=True)
    kind = args.command
    if (args.run is None) == (args.model is None):
        err.print(_("ftui {command}: give a run (id or directory) or --model PATH, not both").format(command=kind))
        return EXIT_USAGE
    if args.model is None and (args.adapter or args.template):
        err.print(_("ftui {command}: --adapter and --template go with --model (a run has its own)").format(command=kind))
        return EXIT_USAGE
    if args.checkpoint and args.base:
        err.print(_("ftui {command}: --checkpoint or --base, not both").format(command=kind))
        return EXIT_USAGE
    for name in ("max_samples", "batch_size", "max_new_tokens", "nproc_per_node"):
        value = getattr(args, name, None)
        if value is not None and value < 1:
            err.print(_("ftui {command}: {option} must be 1 or more").format(command=kind, option="--" + name.replace("_", "-")))
            return EXIT_USAGE
    cutoff_len = getattr(args, "cutoff_len", None)
    if cutoff_len is not None and not 8 <= cutoff_len <= 1_048_576:
        err.print(_("ftui {command}: --cutoff-len must be between 8 and 1048576").format(command=kind))
        return EXIT_USAGE
    run_dir = model_config = None
    root = Path(args.root or default_runs_root()).expanduser()
    if args.run is not None:
        run_dir = resolve_run_arg(args.run, args.root, err)
        if run_dir is None:
            return EXIT_USAGE
    else:
        data = getattr(args, "model_data", None) or {"model_name_or_path": args.model, "template": args.template}
        if cutoff_len is not None:
            data = {**data, "cutoff_len": cutoff_len}
        elif "cutoff_len" not in data:  # none given: the default, or the model's limit below it
            from ftui.config.schema import RunConfig
            from ftui.config.model_checks import fitting_cutoff_len

            data = {**data, "cutoff_len": fitting_cutoff_len(str(args.model), RunConfig.model_fields["cutoff_len"].default)}
        try:
            model_config, _warnings = parse_config({**data, "dataset": args.dataset, "dataset_dir": args.dataset_dir or data.get("dataset_dir", "data"),
                                            "output_dir": str(root)}, getattr(args, "model_source", "--model"))
        except ConfigError as e:
            err.print(error_line(str(e)))
            return EXIT_USAGE
    generation = {k: getattr(args, k) for k in ("max_new_tokens", "temperature", "top_p", "batch_size", "infer_backend") if hasattr(args, k)} if kind == "predict" else {}
    if not sampling_ok(generation.get("temperature", 0), generation.get("top_p", 1)):
        err.print(escape(_("ftui {command}: --temperature must be 0 or more and --top-p in (0, 1]").format(command=kind)))
        return EXIT_USAGE
    try:
        started = start_offline_job(kind, run_dir=run_dir, checkpoint=args.checkpoint, base=args.base, model=args.model,
                                    adapter=args.adapter, model_config=model_config, root=root, dataset=args.dataset,
                                    dataset_dir=args.dataset_dir, max_samples=args.max_samples, generation=generation,
                                    nproc=args.nproc_per_node, device=args.device, cutoff_len=cutoff_len,
                                    eval_batch_size=args.batch_size if kind == "eval" else None)
    except OpError as e:
        return refusal(err, e)
    job_dir = started.job_dir
    out.print(_("{job} job started in {path}").format(job=kind, path=escape(str(job_dir))), soft_wrap=True)
    if args.detach:
        out.print(escape(_("follow it with: ftui watch {path}").format(path=job_dir)))
        return EXIT_OK
    summary, interrupted = follow(job_dir, out, says=JOB_INTERRUPTS)
    out.print(escape(str(job_dir)), soft_wrap=True)  # the last line: the job's directory, whole (scripts read it)
    if summary.status == "completed":
        return EXIT_OK
    return EXIT_INTERRUPTED if interrupted else EXIT_FAILED
