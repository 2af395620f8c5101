"""The life of a job's rank, whatever the job: ``RUN_DIR [--resume CHECKPOINT]`` in, a
``run_end`` event out that says how it ended.

Rank 0 writes ``events.jsonl``; every rank's output goes to the run's log. SIGTERM asks for
a graceful stop (``StopRequest``); a second one exits at once (under Slurm, one within
SIGNAL_REPEAT_S of the first is the same Stop: slurmstepd and the launcher both send it). A rank dies with its
launcher. Every failure ends with a run_end naming the error and a hint, also on a full
disk (the event takes the room the supervisor reserved).
"""

from __future__ import annotations

import signal
import sys
import traceback
from pathlib import Path
from typing import Any, Callable

from ftui.rundir.event_writer import EventWriter
from ftui.config.schema import RunConfig
from ftui.config.load import read_run_config
from ftui.config.machine_checks import gpu_run_on_cpu
from ftui.i18n import _
from ftui.rundir.paths import CONFIG_FILE, EVENTS_FILE
from ftui.runner.engines import DistInfo
from ftui.runner.faults import StopRequest, die_with_parent, disk_full, disk_full_hint, hint_for
from ftui.runner.report import Reporters, open_reporters
from ftui.safety.url_secrets import redact_urls

# body(run_dir, cfg, info, writer, stop, resume) -> (status, reason)
JobBody = Callable[[Path, RunConfig, DistInfo, "EventWriter | None", StopRequest, "Path | None"], tuple[str, str]]


def run_job(job: str, body: JobBody, argv: list[str]) -> int:
    """Runs ``body`` as one rank of ``job``; returns the process's exit code."""
    resume: Path | None = None
    if len(argv) == 3 and argv[1] == "--resume":
        resume = Path(argv[2])
    elif len(argv) != 1:
        print(_("usage: python -m ftui.runner {job} RUN_DIR [--resume CHECKPOINT_DIR]").format(job=job), file=sys.stderr)
        return 2
    run_dir = Path(argv[0])
    die_with_parent()
    info = DistInfo.from_env()
    writer = EventWriter(run_dir / EVENTS_FILE) if info.is_main else None
    stop = StopRequest()
    stop.install()
    # A file-size limit (ulimit -f) must fail the write with EFBIG, not kill the rank unseen.
    if hasattr(signal, "SIGXFSZ"):
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    cfg: RunConfig | None = None
    reporters: Reporters | None = None
    try:
        cfg = read_run_config(run_dir / CONFIG_FILE)  # its schema only: it was checked when the run started
        if job != "train":  # chat, predict, eval, export of a GPU run also run on a machine without one
            cfg = on_this_machine(cfg, writer)
        reporters = open_reporters(cfg, run_dir, writer)  # report_to: mirrors of the events
        status, reason = body(run_dir, cfg, info, writer, stop, resume)
    except BaseException as exc:  # every failure ends with a run_end that says why
        if reporters is not None:
            reporters.close(failed=True)
        try:
            traceback.print_exc()
            sys.stderr.flush()
        except OSError:
            pass  # the log is on a full disk too: the run_end below still says why
        if writer is not None:
            # a hub error quotes the URL it tried: HF_ENDPOINT's user:token@ is blanked (ftui.safety.url_secrets)
            reason = redact_urls(f"{type(exc).__name__}: {exc}".splitlines()[0][:500])
            full = writer.disk_full or disk_full(exc)
            write_end(writer, status="failed", reason=_("disk full: {reason}").format(reason=reason) if full else reason,
                      error_type=type(exc).__name__, error_message=redact_urls(str(exc)[:4000]),
                      hint=_("the config could not be read") if cfg is None
                      else disk_full_hint(cfg, job, run_dir, events_cut=True) if writer.disk_full else hint_for(exc, cfg, job, run_dir))
        return 1
    if reporters is not None:
        reporters.close(failed=status == "failed")  # a stopped run resumes into the same W&B run
    if writer is not None:
        write_end(writer, status=status, reason=reason)
        writer.close()
    return 0


def on_this_machine(cfg: RunConfig, writer: "EventWriter | None") -> RunConfig:
    """A job's config where torch sees no CUDA GPU: a GPU run's job runs on the CPU in a
    precision the CPU computes (ftui.config.machine_checks.gpu_run_on_cpu), said once in the
    events (the follower prints it)."""
    import torch

    if torch.cuda.is_available():
        return cfg
    cfg, note = gpu_run_on_cpu(cfg)
    if note and writer is not None:
        writer.write("log", level="warning", message=note)
    return cfg


def write_end(writer: EventWriter, **fields: Any) -> None:
    """run_end, which EventWriter fits into the reserved room on a full disk; if even that
    fails, the supervisor's own record (which reads the log and the free space) stands."""
    try:
        writer.write("run_end", **fields)
    except OSError as err:
        try:
            print("[ftui] " + _("could not write run_end: {error}").format(error=err), file=sys.stderr, flush=True)
        except OSError:
            pass
