"""End to end in a real terminal (tmux): start `ftui`, launch the demo from the keyboard,
watch the step counter move, quit the app, confirm the run goes on, `ftui attach` it and
see all its steps."""

import os
import re
import shlex
import shutil
import subprocess
import sys
import time

import pytest

from ftui.events import read_all
from ftui.runner.launch import stop_run
from ftui.runs import list_runs, pid_alive, read_launch_info

pytestmark = [pytest.mark.dist, pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed (.ci/run installs it)")]


def tmux(*args: str) -> str:
    return subprocess.run(["tmux", *args], capture_output=True, text=True, check=True).stdout


def screen(session: str) -> str:
    return tmux("capture-pane", "-p", "-t", session)


def wait_screen(session: str, pattern: str, timeout: float = 90.0) -> re.Match:
    deadline = time.time() + timeout
    text = ""
    while time.time() < deadline:
        text = screen(session)
        m = re.search(pattern, text)
        if m:
            return m
        time.sleep(0.3)
    raise AssertionError(f"{pattern!r} never appeared; the screen was:\n{text}")


def test_launch_quit_and_reattach_in_tmux(tmp_path):
    session = f"ftui-e2e-{os.getpid()}"
    ftui = f"{shlex.quote(sys.executable)} -m ftui.cli"
    tmux("new-session", "-d", "-s", session, "-x", "100", "-y", "32", "-c", str(tmp_path),
         "env", "-u", "FTUI_HOME", "TERM=xterm-256color", "bash", "--norc", "--noprofile")
    run = None
    try:
        tmux("send-keys", "-t", session, ftui, "Enter")
        wait_screen(session, r"Model")
        tmux("send-keys", "-t", session, "F2")
        wait_screen(session, r"ready")
        tmux("send-keys", "-t", session, "F5")
        first = int(wait_screen(session, r"step\s+([1-9]\d*) / 390").group(1))
        later = first
        deadline = time.time() + 60
        while later <= first + 2 and time.time() < deadline:
            later = int(wait_screen(session, r"step\s+(\d+) / 390").group(1))
        assert later > first, "the step counter did not move"

        tmux("send-keys", "-t", session, "C-q")
        wait_screen(session, r"[$#]\s*$")  # back at the shell prompt
        (summary,) = list_runs(tmp_path / "runs")
        run = summary.path
        assert pid_alive(read_launch_info(run)["pid"]), "quitting the app stopped the run"
        steps_at_quit = sum(1 for e in read_all(run / "events.jsonl") if e["event"] == "step")
        time.sleep(3)
        assert sum(1 for e in read_all(run / "events.jsonl") if e["event"] == "step") > steps_at_quit

        tmux("send-keys", "-t", session, f"{ftui} attach {run.name}", "Enter")
        wait_screen(session, re.escape(run.name))
        wait_screen(session, r"step\s+390 / 390", timeout=120)
        wait_screen(session, r"completed")
        tmux("send-keys", "-t", session, "C-q")
        wait_screen(session, r"[$#]\s*$")
        assert read_all(run / "events.jsonl")[-1]["status"] == "completed"
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
        if run is not None:
            stop_run(run, force=True)
