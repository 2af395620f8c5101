"""The commands over existing runs: ``ftui runs`` (the list), ``ftui watch`` (plain progress
lines) and ``ftui delete``; and how every command finds the run it is given."""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path
from typing import Callable

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from ftui.cli.console import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, error_line, refusal, safe_console
from ftui.i18n import _
from ftui.ops.errors import OpError
from ftui.rundir.paths import default_runs_root
from ftui.safety.text import visible


def resolve_run_arg(ref: str, root: str | None, err: Console) -> Path | None:
    """The run a command is given (an id, a prefix or a directory), or None after saying why
    there is none."""
    from ftui.ops.lookup import find_run

    try:
        return find_run(ref, root)
    except OpError as e:
        refusal(err, e)
        return None


def cmd_watch(args: argparse.Namespace) -> int:
    from ftui.cli.watch import watch_run

    run_dir = resolve_run_arg(args.run, args.root, safe_console(stderr=True))
    if run_dir is None:
        return EXIT_USAGE
    # Ctrl-C must reach us even when started with SIGINT ignored (a background job of a
    # non-interactive shell, where Python inherits SIG_IGN and never raises KeyboardInterrupt).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        status = watch_run(run_dir, interval=args.interval)
    except KeyboardInterrupt:  # watch only reads: the run is not touched
        print("\n" + _("stopped watching; the run goes on (ftui watch {run} or ftui attach {run} to follow it again)").format(
            run=visible(run_dir.name)), file=sys.stderr, flush=True)
        return EXIT_INTERRUPTED
    return EXIT_OK if status == "completed" else EXIT_FAILED



def cmd_delete(args: argparse.Namespace) -> int:
    from ftui.ops import control

    err = safe_console(stderr=True)
    run_dir = resolve_run_arg(args.run, args.root, err)
    if run_dir is None:
        return EXIT_USAGE
    try:
        asked = control.plan_delete(run_dir)  # refused before asking when live; delete checks again under the job lock
    except OpError as e:
        refusal(err, e)
        return EXIT_FAILED
    plan, summary = asked.plan, asked.summary  # what goes, said in the question: a run that is a link loses only the link
    if not args.yes:
        if not sys.stdin.isatty():
            err.print(error_line(_("not deleting {run} without a yes: stdin is not a terminal (add --yes)").format(run=run_dir.name)))
            return EXIT_FAILED
        try:
            answer = input(_("{question}\n  ({status}, step {step}/{max_steps}) [y/N] ").format(
                question=plan.question(), status=summary.status, step=summary.step, max_steps=summary.max_steps or "?"))
        except (EOFError, KeyboardInterrupt):
            answer = ""
        if answer.strip().lower() not in ("y", "yes", "是"):
            err.print(_("not deleted"))
            return EXIT_FAILED
    try:
        done = control.delete(plan)  # refused if the run changed since the question
    except OpError as e:
        return refusal(err, e)
    print(done.message())
    if done.leftovers:
        print(visible(done.leftovers))
    return EXIT_OK


def _sweep_leftovers(root: Path, run_dirs: list[Path], console_of: Callable[..., Console] = safe_console) -> None:
    """What interrupted deletes (in the runs root) and exports (beside the runs' export out
    dirs) left, removed when certainly ftui's and abandoned (ftui.safety.owned_dirs); one line each on
    stderr, so the listing scripts read stays as it was."""
    from ftui.jobs.export import export_job_out_parents
    from ftui.safety.export_out import sweep_leftovers
    from ftui.rundir.delete import sweep_deleting

    lines = [sweep_deleting(root), *(sweep_leftovers(p) for p in export_job_out_parents(run_dirs))]
    for line in filter(None, lines):
        console_of(stderr=True).print(escape(line), soft_wrap=True)


def cmd_runs(args: argparse.Namespace, console_of: Callable[..., Console] = safe_console) -> int:
    """The runs table (``console_of``: how its consoles are made; main passes its own)."""
    from rich.cells import cell_len

    from ftui.rundir.listing import LIST_COLUMNS, LIST_HEADINGS, list_row, list_runs, RunsRootError

    root = args.root or default_runs_root()
    console = console_of()
    if args.root and not Path(args.root).expanduser().is_dir():  # a typo must not read as "no runs"
        what = _("is not a directory") if Path(args.root).expanduser().exists() else _("does not exist")
        console_of(stderr=True).print(error_line(_("the runs root {path} {what}; give the directory your runs are in").format(
            path=args.root, what=what)))
        return EXIT_USAGE
    try:
        runs = list_runs(root)
    except RunsRootError as e:
        console_of(stderr=True).print(error_line(str(e)))
        return EXIT_FAILED
    _sweep_leftovers(Path(root).expanduser(), [r.path for r in runs], console_of)
    if not runs:
        console.print(escape(_("no runs under {path}").format(path=Path(root).resolve())))
        return EXIT_OK
    # the headings in the interface's language; the cells (statuses included) as the run says them
    header = tuple(_(LIST_HEADINGS[col]) for col in LIST_COLUMNS)
    rows = [tuple(visible(cell, one_line=True) for cell in list_row(r).values()) for r in runs]  # a cell's width as shown
    if not console.is_terminal:  # scripts and `ssh host ftui runs`: one unwrapped line per run
        widths = [max(cell_len(row[i]) for row in [header, *rows]) for i in range(len(header))]
        for row in [header, *rows]:  # padded by cells: a CJK character takes two
            print("  ".join(cell + " " * (w - cell_len(cell)) for cell, w in zip(row, widths)).rstrip())
    else:
        table = Table(title=escape(_("runs in {path}").format(path=Path(root).resolve())))
        for col, heading in zip(LIST_COLUMNS, header):  # a run's id whole, on one line: it is what `ftui attach` takes
            table.add_column(heading, no_wrap=col == "run",
                             min_width=max(cell_len(r.run_id) for r in runs) if col == "run" else None)
        for row in rows:
            table.add_row(*(escape(cell) for cell in row))
        console.print(table)
    for r in runs:  # why a run failed, died, was cancelled or cannot be read; where a Slurm run waits: a line each
        line = _detail_line(r)
        if line is None:
            continue
        if console.is_terminal:
            console.print(Text(visible(line)))
        else:
            print(visible(line))
    return EXIT_OK


def _detail_line(r) -> str | None:
    """The line under the table for a run that needs one: why it failed, died, was cancelled or
    cannot be read (with its hint); where a Slurm run waits or runs."""
    from ftui.rundir.slurm_verdict import slurm_line
    from ftui.rundir.summary import reason_text

    where = slurm_line(r)
    if where is not None:
        return f"{r.run_id}: {' '.join(where.split())[:300]}"
    if r.status not in ("failed", "died", "unreadable", "cancelled") or not r.reason:
        return None
    why = " ".join(reason_text(r.reason).split())
    status = f"{r.status} ({r.slurm_state})" if r.slurm_state and r.slurm_state != r.status.upper() else r.status
    line = _("{run}: {status}: {reason}").format(run=r.run_id, status=status, reason=why[:300])
    if r.hint:
        line += " (" + " ".join(_(r.hint).split())[:300] + ")"
    return line
