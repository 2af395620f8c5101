"""kill -9 of the app (the dashboard that started the run): the run goes on, its status
stays true, and a new app attaches to it."""

import os
import shlex
import shutil
import signal
import subprocess
import sys
import time

import psutil
import pytest

from ftui.events import read_all
from ftui.runner.launch import stop_run
from ftui.runs import list_runs, pid_alive, read_launch_info, summarize_run
from tests.test_e2e_tmux import tmux, wait_screen

pytestmark = [pytest.mark.dist, pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed (.ci/run installs it)")]


def test_kill_9_of_the_app_leaves_the_run_going(tmp_path):
    session = f"ftui-kill-{os.getpid()}"
    tmux("new-session", "-d", "-s", session, "-x", "100", "-y", "32", "-c", str(tmp_path),
         "env", "-u", "FTUI_HOME", "TERM=xterm-256color", "bash", "--norc", "--noprofile")
    run = None
    try:
        tmux("send-keys", "-t", session, f"{shlex.quote(sys.executable)} -m ftui.cli", "Enter")
        wait_screen(session, r"Model")
        tmux("send-keys", "-t", session, "F2")
        wait_screen(session, r"ready")
        tmux("send-keys", "-t", session, "F5")
        wait_screen(session, r"step\s+[1-9]\d* / 390")
        shell = int(tmux("display-message", "-p", "-t", session, "#{pane_pid}").strip())
        (app,) = [p for p in psutil.Process(shell).children() if "ftui.cli" in " ".join(p.cmdline())]
        os.kill(app.pid, signal.SIGKILL)
        deadline = time.time() + 30
        while app.is_running() and app.status() != psutil.STATUS_ZOMBIE and time.time() < deadline:
            time.sleep(0.2)
        (summary,) = list_runs(tmp_path / "runs")
        run = summary.path
        assert pid_alive(read_launch_info(run)["pid"]), "killing the app stopped the run"
        steps = sum(1 for e in read_all(run / "events.jsonl") if e["event"] == "step")
        time.sleep(3)
        assert sum(1 for e in read_all(run / "events.jsonl") if e["event"] == "step") > steps
        assert summarize_run(run).status == "running"
        tmux("send-keys", "-t", session, "reset; clear", "Enter")
        tmux("send-keys", "-t", session, f"{shlex.quote(sys.executable)} -m ftui.cli attach {run.name}", "Enter")
        wait_screen(session, r"running")  # the new app shows the live run
        wait_screen(session, r"step\s+\d+ / 390")
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
        if run is not None:
            stop_run(run, force=True)
