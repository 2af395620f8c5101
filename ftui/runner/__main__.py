"""``python -m ftui.runner JOB ...``: the one entry point of every torch process.

    train RUN_DIR [--resume CHECKPOINT]   a rank of a training job (started by ftui.jobs.spawn,
                                          or by torchrun on several nodes)
    chat                                  the chat worker: JSON lines on stdin and stdout
    data CONFIG.yaml [--limit N] [--text] a config's training examples as JSON lines (ftui data)
    predict JOB_DIR                       a predict job's rank (ftui predict): answers and their scores
    eval JOB_DIR                          an eval job's rank (ftui eval): the stage's eval loss over datasets
    export JOB_DIR                        an export job (ftui export): a standalone model directory
    serve JOB_DIR                         a serve job (ftui serve): an OpenAI-compatible API for one model

Everything outside ``ftui.runner`` starts these as processes and never imports them.
"""

from __future__ import annotations

import importlib
import sys

from ftui.i18n import _

# job -> "module:function(argv) -> exit code"
JOBS = {
    "train": "ftui.runner.train:main",
    "chat": "ftui.runner.chat:main",
    "data": "ftui.runner.examples:main",
    "predict": "ftui.runner.predict:main",
    "eval": "ftui.runner.evaluate:main",
    "export": "ftui.runner.export:main",
    "serve": "ftui.runner.serve:main",
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in JOBS:
        print(_("usage: python -m ftui.runner {jobs} ...").format(jobs="{" + ",".join(JOBS) + "}"), file=sys.stderr)
        return 2
    module, _sep, function = JOBS[argv[0]].partition(":")
    return getattr(importlib.import_module(module), function)(argv[1:])


def exit_now(code: int | None) -> None:
    """Ends the process once the job has returned: its events, checkpoints and reporters are
    written and closed by then. Python's normal exit also runs C++ destructors of threads that
    torch.distributed / DeepSpeed leave behind, and one of them sometimes aborts a rank that
    has finished its work ("terminate called without an active exception", SIGABRT, seen on
    FSDP and ZeRO-3 ranks after a completed run): the launcher then reports a failure that did
    not happen. So the atexit handlers run (wandb's teardown, temporary folders, torch's
    compile workers), stdio, logging and C's stdio buffers are flushed, and the process leaves
    with os._exit, without the interpreter's and C++'s teardown."""
    import atexit
    import ctypes
    import logging
    import os

    try:
        atexit._run_exitfuncs()
    except Exception:  # a handler's failure must not turn a finished job into a failed one
        pass
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe (the reader went away) or a closed stream
            pass
    try:
        ctypes.CDLL(None).fflush(None)  # what C and C++ libraries printed
    except (OSError, AttributeError):
        pass
    os._exit(code if isinstance(code, int) else 0 if code is None else 1)


if __name__ == "__main__":
    exit_now(main())
