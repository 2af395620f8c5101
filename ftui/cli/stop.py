"""``ftui stop RUN|JOB_DIR``: asks a detached run or job (a server from ``ftui serve``, a
predict, eval or export job) to stop, as the app's Stop does (SIGTERM to its process group:
a training run finishes its step and saves a checkpoint, a server ends its requests);
``--kill`` ends it at once."""

from __future__ import annotations

import argparse
from typing import Any

from rich.markup import escape

from ftui.i18n import N_, _
from ftui.rundir.paths import JOB_SPEC_FILE, default_runs_root

HELP = N_("stop a detached run or job (ftui serve's server, a predict, eval or export job) as the app's Stop does")


def add_parser(sub: Any) -> None:
    s = sub.add_parser("stop", help=_(HELP), description=_(HELP) + ".",
                       epilog=_("exit codes: 0 it was running and was asked to stop (or killed), 1 nothing was running there, "
                                "2 no such run"))
    s.add_argument("run", help=_("a run id (prefix) or directory, or a job's directory (RUN/serve/ID, as the job printed it)"))
    s.add_argument("--kill", action="store_true", help=_("kill it now instead of a graceful stop"))
    s.add_argument("--root", default=None, metavar="RUNS_ROOT", help=_("runs root (default: {root})").format(root=default_runs_root()))


def cmd_stop(args: argparse.Namespace) -> int:
    from ftui.cli.console import EXIT_FAILED, EXIT_OK, EXIT_USAGE, safe_console
    from ftui.cli.runs import resolve_run_arg
    from ftui.ops.control import is_running, is_slurm_run, live_jobs, stop

    out, err = safe_console(), safe_console(stderr=True)
    run_dir = resolve_run_arg(args.run, args.root, err)
    if run_dir is None:
        return EXIT_USAGE
    if not is_running(run_dir):
        err.print(escape(_("{path} is not running: nothing to stop").format(path=run_dir)), soft_wrap=True)
        for job in live_jobs(run_dir)[:10]:  # the run itself is idle, a job of it runs: say how to stop that
            err.print(escape(_("  a {job} job of it runs: ftui stop {path}").format(job=job.parent.name, path=job)), soft_wrap=True)
        return EXIT_FAILED
    from ftui.ops.errors import StopFailed

    try:
        said = stop(run_dir, force=args.kill)
    except StopFailed as e:  # a Slurm run: scancel missing, or Slurm refused
        err.print(escape(str(e)), soft_wrap=True)
        return EXIT_FAILED
    if said == _("the run is not running"):  # it ended between the look and the signal
        err.print(escape(_("{path} is not running: nothing to stop").format(path=run_dir)), soft_wrap=True)
        return EXIT_FAILED
    if is_slurm_run(run_dir):
        pass  # what Slurm was asked (a queued job cancelled, the ranks asked to stop), as said
    elif args.kill or (run_dir / JOB_SPEC_FILE).is_file():  # a job's own words: training's (the step, a checkpoint) are not its
        said = _("killed") if args.kill else _("asked to stop; ftui watch {path} shows when it has ended").format(path=run_dir)
    out.print(escape(f"{run_dir}: {said}"), soft_wrap=True)
    return EXIT_OK
