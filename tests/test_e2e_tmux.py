"""End to end in a real terminal (tmux): start `ftui`, launch the demo from the keyboard,
watch the step counter move, quit the app, confirm the run goes on, `ftui attach` it and
see all its steps, stop it and resume it from its dashboard (key R)."""

import os
import re
import shlex
import shutil
import subprocess
import sys
import time

import pytest

from conftest import wait_for
from ftui.rundir.event_reader import read_all
from ftui.jobs.launch import stop_run
from ftui.rundir.launch_record import read_launch_info
from ftui.rundir.listing import list_runs
from ftui.rundir.liveness import pid_alive

FTUI_CMD = f"{shlex.quote(sys.executable)} -m ftui.cli.main"


def new_shell(session: str, cwd) -> None:
    """A detached tmux session running a plain bash in ``cwd``, 100x32, whose FTUI_HOME is
    ``cwd`` (runs go to cwd/runs, never to the user's own)."""
    tmux("new-session", "-d", "-s", session, "-x", "100", "-y", "32", "-c", str(cwd),
         "env", f"FTUI_HOME={cwd}", "TERM=xterm-256color", "bash", "--norc", "--noprofile")


def start_demo_in_app(session: str) -> int:
    """Opens ftui, loads the demo (F2), starts it (F5); returns the first step shown."""
    tmux("send-keys", "-t", session, FTUI_CMD, "Enter")
    wait_screen(session, r"Model")
    tmux("send-keys", "-t", session, "F2")
    wait_screen(session, r"ready")
    tmux("send-keys", "-t", session, "F5")
    return int(wait_screen(session, r"step\s+([1-9]\d*) / 390").group(1))


def only_run_keeps_training(root, why: str):
    """The one run under ``root``: its launcher is alive and it writes new steps."""
    (summary,) = list_runs(root)
    run = summary.path
    assert pid_alive(read_launch_info(run)["pid"]), why
    def steps() -> int:
        return sum(1 for e in read_all(run / "events.jsonl") if e["event"] == "step")

    before = steps()
    # a new step, however long a loaded machine takes for it (no wall-clock budget)
    assert wait_for(lambda: steps() > before, timeout=300), why
    return run


pytestmark = [pytest.mark.dist, pytest.mark.skipif(shutil.which("tmux") is None, reason="drives the app in a real terminal through tmux, which is not installed (.ci/run installs it)")]


def tmux(*args: str) -> str:
    return subprocess.run(["tmux", *args], capture_output=True, text=True, check=True).stdout


def screen(session: str) -> str:
    return tmux("capture-pane", "-p", "-t", session)


def wait_screen(session: str, pattern: str, timeout: float = 240.0, until=lambda m: True) -> re.Match:
    """The first match of ``pattern`` on the screen (for which ``until`` holds); ``timeout``
    only bounds a hang, it is no speed budget."""
    deadline = time.time() + timeout
    text = ""
    while time.time() < deadline:
        text = screen(session)
        m = re.search(pattern, text)
        if m and until(m):
            return m
        time.sleep(0.3)
    raise AssertionError(f"{pattern!r} never appeared; the screen was:\n{text}")


def test_launch_quit_and_reattach_in_tmux(tmp_path):
    session = f"ftui-e2e-{os.getpid()}"
    new_shell(session, tmp_path)
    run = None
    try:
        first = start_demo_in_app(session)
        later = first
        deadline = time.time() + 240
        while later <= first + 2 and time.time() < deadline:
            later = int(wait_screen(session, r"step\s+(\d+) / 390").group(1))
        assert later > first, "the step counter did not move"

        tmux("send-keys", "-t", session, "C-q")
        wait_screen(session, r"[$#]\s*$")  # back at the shell prompt
        run = only_run_keeps_training(tmp_path / "runs", "quitting the app stopped the run")

        steps_before = sum(1 for e in read_all(run / "events.jsonl") if e.get("event") == "step")
        tmux("send-keys", "-t", session, f"{FTUI_CMD} attach {run.name}", "Enter")
        wait_screen(session, re.escape(run.name))
        # the re-attached dashboard follows the live run: a step beyond what was written at quit
        # (or its end, on a machine fast enough to finish first); then Stop ends it, so the test
        # never waits for the whole demo
        def beyond_quit(m: re.Match) -> bool:
            return m.group(1) is None or int(m.group(1)) > steps_before

        seen = wait_screen(session, r"step\s+(\d+) / 390|completed", until=beyond_quit)
        if seen.group(1) is not None:
            tmux("send-keys", "-t", session, "s")
            wait_screen(session, r"Enter: Stop")
            tmux("send-keys", "-t", session, "Enter")
            stopped = wait_screen(session, r"STOPPED: stop requested at step (\d+)|completed", timeout=240)
            if stopped.group(1) is not None:
                resume_from_the_dashboard(session, run, int(stopped.group(1)))
        tmux("send-keys", "-t", session, "C-q")
        wait_screen(session, r"[$#]\s*$")
        assert read_all(run / "events.jsonl")[-1]["status"] in ("stopped", "completed")
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
        if run is not None:
            stop_run(run, force=True)


def resume_from_the_dashboard(session: str, run, stopped_at: int) -> None:
    """Key R on the stopped run's dashboard resumes it (the checkpoint the Stop saved): the
    same dashboard follows the new job past the step it stopped at; then it is stopped again."""
    tmux("send-keys", "-t", session, "R")
    wait_screen(session, r"step\s+(\d+) / 390", until=lambda m: int(m.group(1)) > stopped_at)
    tmux("send-keys", "-t", session, "s")
    wait_screen(session, r"Enter: Stop")
    tmux("send-keys", "-t", session, "Enter")
    wait_screen(session, r"STOPPED: stop requested at step (\d+)|completed", timeout=240,
                until=lambda m: m.group(1) is None or int(m.group(1)) > stopped_at)
    events = read_all(run / "events.jsonl")
    assert [e["event"] for e in events].count("run_start") == 2
    resumed_from = re.search(r"step-(\d+)$", read_launch_info(run)["resumed_from"])  # the checkpoint the Stop saved
    assert resumed_from and int(resumed_from.group(1)) <= stopped_at


@pytest.mark.slow  # CI time: the index of runs outside the root is tested without a terminal (test_runs_root.py)
def test_a_run_put_elsewhere_by_output_dir_is_listed_attached_and_stopped_from_another_directory(tmp_path):
    """Issue 13, items 1, 2 and 5 as a user meets them. A config whose `output_dir` puts the run
    outside the runs root (LLaMA-Factory's `saves/...`) is started from its project directory;
    from another directory `ftui runs` lists it (its id whole) and `ftui attach` finds it; in the
    dashboard `s` then Enter stops it (Enter is the highlighted "Stop"); the Stop leaves no
    traceback and no failed launcher, neither in train.log nor in the log panel."""
    from conftest import tiny_config

    project, other = tmp_path / "project", tmp_path / "other"
    project.mkdir()
    other.mkdir()
    # Far more steps than it will take: it is stopped while it runs, whatever the machine's speed.
    cfg = tiny_config(project, output_dir="saves/tiny", max_steps=100_000, run_name="far")
    (project / "far.yaml").write_text(cfg.to_yaml())
    session = f"ftui-far-{os.getpid()}"
    new_shell(session, project)  # FTUI_HOME=project: its runs root, project/runs, is not where the run goes
    run = None
    try:
        tmux("send-keys", "-t", session, f"{FTUI_CMD} train far.yaml --detach", "Enter")
        run_id = wait_screen(session, r"run (far-\S+) started in saves/tiny/").group(1)
        run = project / "saves" / "tiny" / run_id
        tmux("send-keys", "-t", session, f"clear; cd {shlex.quote(str(other))} && {FTUI_CMD} runs", "Enter")
        wait_screen(session, re.escape(run_id) + r"\s+│\s+(starting|running)\s+│")

        tmux("send-keys", "-t", session, f"clear; {FTUI_CMD} attach {run_id}", "Enter")
        wait_screen(session, r"step\s+[1-9]\d* / 100000")  # the live run's dashboard
        tmux("send-keys", "-t", session, "s")
        wait_screen(session, r"Enter: Stop")
        tmux("send-keys", "-t", session, "Enter")
        wait_screen(session, r"STOPPED: stop requested at step \d+")
        assert [e for e in read_all(run / "events.jsonl") if e["event"] == "run_end"][-1]["status"] == "stopped"

        # The log panel as a user finds it later: quit, attach again (no notification over it).
        tmux("send-keys", "-t", session, "C-q")
        wait_screen(session, r"[$#]\s*$")
        assert wait_for(lambda: "launcher exited" in (run / "train.log").read_text(), timeout=240)
        tmux("send-keys", "-t", session, f"clear; {FTUI_CMD} attach {run_id}", "Enter")
        shown = wait_screen(session, r"launcher exited with code 0").string
        log = (run / "train.log").read_text()
        for bad in ("SignalException", "Traceback", "exited with code 1"):
            assert bad not in log, log
            assert bad not in shown, shown
        tmux("send-keys", "-t", session, "C-q")
        wait_screen(session, r"[$#]\s*$")
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
        if run is not None and run.exists():
            stop_run(run, force=True)


@pytest.mark.slow  # CI time: the switch is tested with the pilot (test_i18n_screens.py, test_i18n_form.py), the real terminal by test_launch_quit_and_reattach_in_tmux
def test_the_app_in_chinese_and_switched_to_english_in_tmux(tmp_path):
    """`FTUI_LANG=zh ftui` in a real terminal shows the form in Chinese; Ctrl+T switches it to
    English keeping what the form holds (the demo loaded with F2)."""
    session = f"ftui-zh-{os.getpid()}"
    new_shell(session, tmp_path)
    try:
        tmux("send-keys", "-t", session, f"FTUI_LANG=zh {FTUI_CMD}", "Enter")
        wait_screen(session, r"模型")
        tmux("send-keys", "-t", session, "F2")
        wait_screen(session, r"就绪")
        assert "ftui-demo" in screen(session)
        tmux("send-keys", "-t", session, "C-t")
        wait_screen(session, r"\bModel\b")
        wait_screen(session, r"\bready\b")
        text = screen(session)
        assert "ftui-demo" in text and "模型" not in text, text
        tmux("send-keys", "-t", session, "C-q")
        wait_screen(session, r"[#$]\s*\Z")  # the shell prompt again: the app quit
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)


def test_the_form_shows_a_datasets_image_in_a_real_terminal(tmp_path):
    """`ftui --config vl.yaml` with a tiny Qwen2-VL and LLaMA-Factory's mllm_demo: the Data
    group lists the first record's image (size, image tokens) and draws it with textual-image
    (tmux draws no Sixel or Kitty graphics here, so coloured half cells: ▀ / ▄)."""
    import yaml

    from tests.vlm_models import vlm_dir

    lf_data = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data", "llamafactory")
    model = vlm_dir("qwen2_vl", tmp_path / "models")
    (tmp_path / "vl.yaml").write_text(yaml.safe_dump({
        "model_name_or_path": str(model), "template": "qwen2_vl", "stage": "sft", "finetuning_type": "lora",
        "dataset": "mllm_demo", "dataset_dir": os.path.abspath(lf_data), "cutoff_len": 4096, "image_max_pixels": 65536}))
    session = f"ftui-vl-{os.getpid()}"
    tmux("new-session", "-d", "-s", session, "-x", "120", "-y", "60", "-c", str(tmp_path),
         "env", f"FTUI_HOME={tmp_path}", "TERM=xterm-256color", "bash", "--norc", "--noprofile")
    try:
        tmux("send-keys", "-t", session, f"{FTUI_CMD} --config vl.yaml", "Enter")
        wait_screen(session, r"mllm_demo_data/1\.jpg\s+\d+ x \d+, \d+ image tokens")
        wait_screen(session, r"[▀▄]{8}")  # the picture, in half cells
        tmux("send-keys", "-t", session, "C-q")
        wait_screen(session, r"[#$]\s*\Z")
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
