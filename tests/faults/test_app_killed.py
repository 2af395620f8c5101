"""kill -9 of the app (the dashboard that started the run): the run goes on, its status
stays true, and a new app attaches to it."""

import os
import shutil
import signal
import subprocess
import time

import psutil
import pytest

from ftui.jobs.launch import stop_run
from ftui.rundir.follower import summarize_run
from tests.test_e2e_tmux import FTUI_CMD, new_shell, only_run_keeps_training, start_demo_in_app, tmux, wait_screen

pytestmark = [pytest.mark.dist, pytest.mark.skipif(shutil.which("tmux") is None, reason="drives the app in a real terminal through tmux, which is not installed (.ci/run installs it)")]


def test_kill_9_of_the_app_leaves_the_run_going(tmp_path):
    session = f"ftui-kill-{os.getpid()}"
    new_shell(session, tmp_path)
    run = None
    try:
        start_demo_in_app(session)
        shell = int(tmux("display-message", "-p", "-t", session, "#{pane_pid}").strip())
        (app,) = [p for p in psutil.Process(shell).children() if "ftui.cli.main" in " ".join(p.cmdline())]
        os.kill(app.pid, signal.SIGKILL)
        deadline = time.time() + 30
        while app.is_running() and app.status() != psutil.STATUS_ZOMBIE and time.time() < deadline:
            time.sleep(0.2)
        run = only_run_keeps_training(tmp_path / "runs", "killing the app stopped the run")
        assert summarize_run(run).status == "running"
        tmux("send-keys", "-t", session, "reset; clear", "Enter")
        tmux("send-keys", "-t", session, f"{FTUI_CMD} attach {run.name}", "Enter")
        wait_screen(session, r"running")  # the new app shows the live run
        wait_screen(session, r"step\s+\d+ / 390")
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
        if run is not None:
            stop_run(run, force=True)
