"""``ftui train``: start a run, resume one (``--resume``, or LLaMA-Factory's
``resume_from_checkpoint``), or join node 0's multi-node run (``--node-rank``), then follow it.
The operations are ftui.ops' (the app's are the same); this module reads the arguments and
renders what the operations return or refuse."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any, Callable

from rich.console import Console
from rich.markup import escape

from ftui.cli.console import (EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, error_line, print_notices, refusal,
                              safe_console, warning_line)
from ftui.cli.following import follow_job
from ftui.cli.options import parse_set
from ftui.cli.slurm_flags import slurm_overrides
from ftui.i18n import _
from ftui.ops.errors import OpError

if TYPE_CHECKING:
    from ftui.config.schema import RunConfig
    from ftui.ops.resume import PreparedResume


def load_train_config(args: argparse.Namespace, err: Console, data_needed: bool = True) -> RunConfig | None:
    """The config of ftui train / data / plan, checked; ``data_needed`` False (plan --gpu-memory,
    for another machine): the datasets need not be here, only a registry entry that names them
    must be sound."""
    from ftui.config.problems import ConfigError
    from ftui.config.load import demo_data, load_config, parse_config

    if args.preset and args.config:
        err.print(error_line(_("give a CONFIG.yaml or --preset {preset}, not both (--set changes a key of either)").format(preset=args.preset)))
        return None
    overrides = parse_set(args.overrides) | slurm_overrides(args)
    if args.node_rank is not None:
        overrides["node_rank"] = args.node_rank
    if args.runs_root:
        overrides["output_dir"] = args.runs_root
    try:
        if args.preset == "demo":  # the preflight the launch form runs too (ftui.config.preflight)
            cfg, warnings = parse_config(demo_data(**overrides), "demo preset", data_needed=data_needed)
        elif args.config:
            cfg, warnings = load_config(args.config, overrides, data_needed=data_needed)
        else:
            err.print(_("ftui {command}: give a CONFIG.yaml or --preset demo").format(command=args.command))
            return None
    except ConfigError as e:
        err.print(error_line(str(e)))
        return None
    from ftui.plan.model_files import download_warning

    for w in [*warnings, download_warning(cfg.model_name_or_path, cfg.model_init == "random")]:
        if w:
            err.print(warning_line(w))
    if cfg.trust_remote_code:
        err.print(warning_line(_("trust_remote_code is on: Python code from the model's repository will run in the training processes")))
    return cfg



def prepare_resume(args: argparse.Namespace, err: Console) -> PreparedResume | None:
    """``--resume RUN [--checkpoint N] [--set K=V] [--allow-changed]`` checked by the
    operations layer (ftui.ops.resume), its notices and refusal printed; None when refused."""
    from ftui.ops.resume import ResumeRequest, prepare_resume as prepare

    if args.config or args.preset:
        err.print(error_line(_("--resume continues a run with its own config.yaml; give no CONFIG or --preset (use --set to change a key)")))
        return None
    request = ResumeRequest(run=args.resume, runs_root=args.runs_root, checkpoint=args.checkpoint,
                            overrides=parse_set(args.overrides) | slurm_overrides(args), allow_changed=args.allow_changed,
                            trust_warned=getattr(args, "trust_warned", False))
    try:
        prepared = prepare(request)
    except OpError as e:
        refusal(err, e)
        return None
    print_notices(err, prepared.notices)
    return prepared


def _as_resume_args(args: argparse.Namespace, cfg: RunConfig) -> argparse.Namespace:
    """LLaMA-Factory's ``resume_from_checkpoint: PATH`` as ``ftui train --resume RUN
    --checkpoint PATH``: the run it names goes on from that checkpoint (its newest, for a run
    directory), with the keys this YAML sets differently from the run's config.yaml applied
    as --set overrides (ftui.ops.resume.resume_target_request)."""
    from ftui.ops.resume import resume_target_request

    run_dir, ckpt, changed = resume_target_request(cfg)
    return argparse.Namespace(**{**vars(args), "config": None, "preset": None, "resume": str(run_dir), "runs_root": None,
                                 "checkpoint": str(ckpt) if ckpt else None, "trust_warned": cfg.trust_remote_code,
                                 "overrides": [f"{k}={json.dumps(v)}" for k, v in changed.items()]})


def cmd_train(args: argparse.Namespace, follow: Callable[..., tuple[Any, bool]] = follow_job) -> int:
    """``follow``: how a started job is followed (main passes its own)."""
    from ftui.ops import start as ops_start

    out, err = safe_console(), safe_console(stderr=True)
    if args.checkpoint and not args.resume:
        err.print(error_line(_("--checkpoint goes with --resume RUN")))
        return EXIT_USAGE
    if getattr(args, "dry_run", False) and (args.resume or args.node_rank):
        err.print(error_line(_("--dry-run prints a new run's batch script: give a CONFIG (not --resume or --node-rank)")))
        return EXIT_USAGE
    if args.node_rank:
        if slurm_overrides(args):
            err.print(error_line(_("--node-rank joins a run started by hand on each node; under Slurm, Slurm starts "
                                   "every node: drop --node-rank (or the Slurm flags)")))
            return EXIT_USAGE
        return _join_run(args, out, err, follow)
    prepared = None
    if args.resume:
        prepared = prepare_resume(args, err)
        if prepared is None:
            return EXIT_USAGE
    else:
        from ftui.cli.lf_predict import llamafactory_predict_args

        predict = llamafactory_predict_args(args, err)
        if predict is not None:  # LLaMA-Factory's way in: do_predict + predict_with_generate, no do_train
            from ftui.cli.jobs import cmd_offline_job

            return cmd_offline_job(predict, follow) if predict else EXIT_USAGE
        cfg = load_train_config(args, err)
        if cfg is None:
            return EXIT_USAGE
        if getattr(args, "dry_run", False):
            return _dry_run(cfg, out, err)
        if cfg.resume_from_checkpoint:
            prepared = prepare_resume(_as_resume_args(args, cfg), err)
            if prepared is None:
                return EXIT_USAGE
    try:
        started = ops_start.start_resumed(prepared) if prepared is not None else ops_start.start(cfg)
    except OpError as e:
        return refusal(err, e)
    run_dir, cfg, resume = started.run_dir, started.cfg, started.resumed_from
    if cfg.launcher == "slurm":
        print_notices(err, [n for n in started.notices if prepared is None or n not in prepared.notices])
        _say_submitted(out, started.info, run_dir)
    if resume:
        out.print(_("run {run} resumed from {checkpoint} in {path}").format(
            run=f"[bold]{escape(run_dir.name)}[/]", checkpoint=escape(resume.name), path=escape(str(run_dir))))
    else:
        out.print(_("run {run} started in {path}").format(run=f"[bold]{escape(run_dir.name)}[/]", path=escape(str(run_dir))))
    if cfg.nnodes > 1 and cfg.launcher != "slurm":  # the launcher's rendezvous arguments, for when the nodes do not meet (launch.json has it always)
        out.print(f"[dim]{escape(started.info['command_line'])}[/]")
        out.print(_("on each other node, run:"))
        for line in started.other_node_commands():
            out.print(f"  {escape(line)}")
    if args.detach:
        out.print(escape(_("follow it with: ftui attach {run}   (or: ftui watch {run})").format(run=run_dir.name)))
        return EXIT_OK
    summary, interrupted = follow(run_dir, out, started.offset)
    from ftui.rundir.checkpoints import checkpoints

    if summary.status != "completed" and checkpoints(run_dir):
        out.print(escape(_("resume with: ftui train --resume {run}").format(run=run_dir.name)))
    if summary.status == "completed":
        from ftui.rundir.paths import FINAL_DIR

        if (run_dir / FINAL_DIR).is_dir():  # where the result is, and what uses it
            out.print(escape(_("the trained model: {path} (ftui chat --run {run}; ftui predict {run} --dataset ...; "
                               "ftui export {run} --out DIR)").format(path=run_dir / FINAL_DIR, run=run_dir.name)), soft_wrap=True)
        return EXIT_OK
    return EXIT_INTERRUPTED if interrupted else EXIT_FAILED


def _dry_run(cfg: RunConfig, out: Console, err: Console) -> int:
    """``--dry-run``: the batch script a submit would write, for the run directory it would get;
    nothing is created."""
    from rich.text import Text

    from ftui.jobs.slurm_submit import SlurmSubmitError, dry_run_script

    if cfg.launcher != "slurm":
        err.print(error_line(_("--dry-run prints the batch script of a run submitted to Slurm: add --slurm, or set "
                               "launcher: slurm in the config")))
        return EXIT_USAGE
    try:
        run_dir, script = dry_run_script(cfg)
    except SlurmSubmitError as e:
        err.print(error_line(str(e)))
        return EXIT_USAGE
    err.print(escape(_("the run directory would be {path} (nothing was created); the batch script:").format(path=run_dir)))
    out.print(Text(script.rstrip("\n")), soft_wrap=True, highlight=False)
    return EXIT_OK


def _say_submitted(out: Console, info: dict[str, Any], run_dir: Any) -> None:
    """The job id and the script of a submitted run."""
    from ftui.rundir.paths import SLURM_SCRIPT_FILE

    job = info.get("scheduler", {})
    where = f" ({job['cluster']})" if job.get("cluster") else ""
    out.print(escape(_("submitted to Slurm as job {job}{cluster}; the batch script: {script}").format(
        job=job.get("job_id"), cluster=where, script=run_dir / SLURM_SCRIPT_FILE)), soft_wrap=True)


def _join_run(args: argparse.Namespace, out: Console, err: Console, follow: Callable[..., tuple[Any, bool]] = follow_job) -> int:
    """``ftui train RUN/config.yaml --node-rank K`` (or ``--resume RUN --checkpoint N
    --node-rank K``): node K > 0 of a multi-node run joins the run directory node 0 made
    (ftui.ops.start.join)."""
    from ftui.ops.start import join
    from ftui.rundir.paths import LOG_FILE

    rank = args.node_rank
    if rank < 0:
        err.print(error_line(_("--node-rank must be 0 or more")))
        return EXIT_USAGE
    if args.preset or args.overrides or args.runs_root:
        err.print(error_line(_("--node-rank {rank} joins the run node 0 started, with that run's config: give no --preset, "
                               "--set or --root on this node (--set on node 0 changes the run's config)").format(rank=rank)))
        return EXIT_USAGE
    if args.resume and args.config:
        err.print(error_line(_("--resume continues a run with its own config.yaml; give no CONFIG or --preset (use --set to change a key)")))
        return EXIT_USAGE
    try:
        started = join(rank, config_path=args.config, resume_run=args.resume or None, checkpoint=args.checkpoint)
    except OpError as e:
        return refusal(err, e)
    print_notices(err, started.notices)
    run_dir, home = started.run_dir, started.home
    out.print(_("node {node} joined run {run} in {path}; its ranks write their part of each checkpoint there").format(
        node=rank, run=f"[bold]{escape(run_dir.name)}[/]", path=escape(str(run_dir))))
    out.print(f"[dim]{escape(started.info['command_line'])}[/]")
    out.print(escape(_("the run's progress: ftui attach {path} (node 0 writes its events); this node's log: {log}").format(
        path=run_dir, log=home / LOG_FILE)))
    if args.detach:
        return EXIT_OK
    summary, interrupted = follow(home, out, started.offset)
    if summary.status == "completed":
        return EXIT_OK
    return EXIT_INTERRUPTED if interrupted else EXIT_FAILED
