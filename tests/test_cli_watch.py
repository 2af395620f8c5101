"""`ftui watch` (plain lines without a TTY) and `ftui attach` / `ftui runs` errors."""

import subprocess
import sys

import pytest

from tests.fixtures_runs import write_run

FTUI = [sys.executable, "-m", "ftui.cli.main"]


def test_watch_prints_plain_lines_and_exits_by_status(tmp_path):
    root = tmp_path / "runs"
    write_run(root, "done-1", steps=30, max_steps=30, end="completed", every=10)
    write_run(root, "oom-1", steps=20, max_steps=30, end="failed", every=10)
    ok = subprocess.run([*FTUI, "watch", "done", "--root", str(root), "--interval", "0.05"], capture_output=True, text=True, timeout=30)
    assert ok.returncode == 0
    lines = ok.stdout.splitlines()
    assert lines[0].startswith("done-1: Qwen/Qwen2.5-0.5B lora ddp bf16 world_size=2 max_steps=30")
    assert any(l.startswith("step 30/30 loss ") for l in lines) and lines[-1].startswith("completed")
    assert "\x1b[" not in ok.stdout  # no colour codes or cursor movement
    bad = subprocess.run([*FTUI, "watch", "oom", "--root", str(root), "--interval", "0.05"], capture_output=True, text=True, timeout=30)
    assert bad.returncode == 1
    assert "failed: OutOfMemoryError" in bad.stdout and "hint: halve per_device_train_batch_size" in bad.stdout


def test_attach_and_watch_of_a_missing_run_exit_2_with_a_message(tmp_path):
    for cmd in ("attach", "watch"):
        proc = subprocess.run([*FTUI, cmd, "nope", "--root", str(tmp_path)], capture_output=True, text=True, timeout=30)
        assert proc.returncode == 2 and "no run 'nope'" in proc.stderr and "ftui runs" in proc.stderr


def test_ambiguous_prefix_is_refused(tmp_path):
    root = tmp_path / "runs"
    write_run(root, "demo-1", steps=1, max_steps=1, end="completed")
    write_run(root, "demo-2", steps=1, max_steps=1, end="completed")
    proc = subprocess.run([*FTUI, "watch", "demo", "--root", str(root)], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2 and "matches 2 runs" in proc.stderr


def test_help_lists_every_command():
    out = subprocess.run([*FTUI, "--help"], capture_output=True, text=True).stdout
    for cmd in ("train", "plan", "data", "presets", "chat", "runs", "attach", "watch", "delete"):
        assert cmd in out
    assert "--root RUNS_ROOT" in out and "--config CONFIG.yaml" in out
    assert "APP_ROOT" not in out and "APP_CONFIG" not in out  # argparse's internal names


def test_every_command_takes_the_runs_root_as_root_and_train_keeps_the_old_name():
    from ftui.cli.main import build_parser

    for cmd in ("train", "runs", "attach", "watch", "chat"):
        out = subprocess.run([*FTUI, cmd, "--help"], capture_output=True, text=True).stdout
        assert "--root RUNS_ROOT" in out and "--runs-root" not in out, cmd
    parser = build_parser()
    assert parser.parse_args(["train", "c.yaml", "--root", "r1"]).runs_root == "r1"
    assert parser.parse_args(["train", "c.yaml", "--runs-root", "r2"]).runs_root == "r2"  # hidden alias


@pytest.mark.parametrize("reader", ["watch", "follow", "summary"])
def test_every_reader_reads_once_more_when_the_launcher_is_gone(tmp_path, monkeypatch, reader):
    """One follower decides every reader's end: a run_end written just as the launcher exits
    is read (completed, not died), by ``ftui watch``, ``ftui train``'s display and the runs list."""
    import io
    import json

    from rich.console import Console

    import ftui.rundir.follower as follower
    from ftui.rundir.events import make_event
    from ftui.cli.follow import follow_run
    from ftui.cli.watch import watch_run

    run = write_run(tmp_path / "runs", "late-1", steps=5, max_steps=5)

    def gone_after_writing_run_end(*_args):
        with open(run / "events.jsonl", "a") as fh:
            fh.write(json.dumps(make_event("run_end", status="completed", reason="5 steps")) + "\n")
        return True

    monkeypatch.setattr(follower, "launcher_gone", gone_after_writing_run_end)
    status = {"watch": lambda: watch_run(run, interval=0.01, out=io.StringIO()),
              "follow": lambda: follow_run(run, Console(file=io.StringIO()), poll_s=0.01).status,
              "summary": lambda: follower.summarize_run(run).status}[reader]()
    assert status == "completed"


def test_watch_lines_carry_a_new_stages_figures(tmp_path):
    import io

    from ftui.cli.watch import watch_run

    run = write_run(tmp_path / "runs", "dpo-1", steps=50, max_steps=50, end="completed",
                    step_extras={"rewards/accuracies": 0.75, "\x1b[2Jevil": 1.0}, eval_extras={"eval_rewards/margins": 1.2})
    out = io.StringIO()
    assert watch_run(run, interval=0.01, out=out) == "completed"
    text = out.getvalue()
    assert "step 50/50 loss" in text and "rewards/accuracies 0.75" in text and "eval_rewards/margins 1.2" in text
    assert "evil" not in text


def test_watch_prints_a_preference_runs_figures_and_its_eval_figures(tmp_path):
    """Issue 15: `ftui watch` of a DPO run (events as the writer writes them, read as columns):
    the step lines carry rewards_margin, rewards_accuracy, ..., the eval lines their eval_ twins."""
    from tests.fixtures_runs import dpo_figures

    root = tmp_path / "runs"
    write_run(root, "dpo-1", steps=100, max_steps=100, end="completed", step_extras=dpo_figures,
              eval_extras=lambda s: dpo_figures(s, "eval_"), as_written=True)
    proc = subprocess.run([*FTUI, "watch", "dpo", "--root", str(root), "--interval", "0.05"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    last = dpo_figures(100)
    step = next(line for line in proc.stdout.splitlines() if line.startswith("step 100/100 loss"))
    assert f"rewards_margin {last['rewards_margin']:.4g} rewards_accuracy 1" in step and "logps_rejected -42.81" in step
    evals = [line for line in proc.stdout.splitlines() if " eval_loss " in line]
    assert [line.split()[1] for line in evals] == ["50", "100"]
    assert f"eval_rewards_margin {dpo_figures(50)['rewards_margin']:.4g}" in evals[0] and "eval_rewards_accuracy 0.75" in evals[0]


def test_a_failure_is_told_once(tmp_path):
    """The run_end reason is the error's first line: `ftui watch` and `ftui train`'s follower
    print it once, then the rest of the error."""
    import io

    from rich.console import Console

    from ftui.rundir.event_writer import EventWriter
    from ftui.cli.follow import follow_run

    root = tmp_path / "runs"
    run = write_run(root, "bad-1", steps=2, max_steps=10)
    with EventWriter(run / "events.jsonl") as w:
        w.write("run_end", status="failed", reason="OSError: no file named model.safetensors",
                error_type="OSError", error_message="no file named model.safetensors\nsearched in /models/x", hint="h")
    watched = subprocess.run([*FTUI, "watch", "bad", "--root", str(root)], capture_output=True, text=True, timeout=60).stdout
    buffer = io.StringIO()
    follow_run(run, console=Console(file=buffer, width=200), poll_s=0.05)
    for out in (watched, buffer.getvalue()):
        assert out.count("no file named model.safetensors") == 1 and "searched in /models/x" in out, out


def test_ctrl_c_in_watch_exits_130_quietly_and_says_the_run_goes_on(tmp_path):
    import signal

    root = tmp_path / "runs"
    write_run(root, "live-1", steps=10, max_steps=30)  # no run_end, launched on another host: running
    proc = subprocess.Popen([*FTUI, "watch", "live", "--root", str(root), "--interval", "0.05"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().startswith("live-1: ")  # watching: the handlers are in place
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    assert "the run goes on" in err and "ftui attach live-1" in err


def test_runs_in_a_terminal_shows_each_run_id_whole_at_80_columns(tmp_path, monkeypatch):
    """The id is what `ftui attach` takes: a 100-column terminal showed `t-2026112…`."""
    import io

    from rich.console import Console

    from ftui.cli import main as cli

    root = tmp_path / "runs"
    ids = ["t-20261123-025821", "llama3-lora-sft-20261123-031502"]
    for run_id in ids:
        write_run(root, run_id, steps=5, max_steps=100, model="/models/" + "long-name/" * 4 + "Llama-3.2-1B")
    out = io.StringIO()
    monkeypatch.setattr(cli, "safe_console", lambda stderr=False: Console(file=out, width=80, force_terminal=True, emoji=False))
    assert cli.main(["runs", "--root", str(root)]) == 0
    text = out.getvalue()
    assert all(run_id in text for run_id in ids), text


def test_a_predict_job_is_followed_with_its_own_figures_and_its_results_under_the_bar(tmp_path):
    """A predict job has examples, not steps: the follower (ftui predict) shows its source and
    dataset instead of '0 of N parameters train', no loss, its results after the finished bar,
    and no '(step 0)' at the end; ftui watch ends without '(step 0)' too."""
    import io

    from rich.console import Console

    from ftui.rundir.event_writer import EventWriter
    from ftui.cli.follow import follow_run

    job = tmp_path / "runs" / "base-1" / "predict" / "p1"
    job.mkdir(parents=True)
    (job / "config.yaml").write_text("model_name_or_path: m\ndataset: d\n")
    with EventWriter(job / "events.jsonl") as w:
        w.write("run_start", run_id="p1", job="predict", engine="predict", precision="float32", method="generate",
                world_size=1, nodes=1, model="m", total_params=1000, trainable_params=0, max_steps=3,
                planned_tokens_per_step=0, examples=3, source="base-1 final", dataset="alpaca_en_demo", device="cpu")
        w.write("progress", done=3, total=3, examples_per_s=1.5, tokens_per_s=42.0)
        w.write("predict", predict_samples=3, predict_bleu_4=12.5, predict_rouge_l=30.25)
        w.write("run_end", status="completed", reason="3 examples: generated_predictions.jsonl")
    buffer = io.StringIO()
    assert follow_run(job, console=Console(file=buffer, width=200), poll_s=0.05).status == "completed"
    out = buffer.getvalue()
    assert "predict: base-1 final on alpaca_en_demo, 3 examples · cpu · float32 · 1 process(es)" in out
    assert "parameters train" not in out and "loss" not in out and "(step" not in out
    assert out.index("3/3") < out.index("results: BLEU-4 12.50, ROUGE-L 30.25") < out.index("completed: 3 examples")
    watched = subprocess.run([*FTUI, "watch", str(job)], capture_output=True, text=True, timeout=60).stdout
    assert watched.splitlines()[-1] == "completed: 3 examples: generated_predictions.jsonl"


def test_ctrl_c_in_a_command_with_nothing_to_stop_exits_130_without_a_traceback(monkeypatch, capsys):
    """ftui chat / data / plan had no handler: Ctrl-C printed Python's traceback."""
    from ftui.cli import main as cli

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "cmd_data", interrupted)
    assert cli.main(["data", "--preset", "demo", "--show", "1"]) == 130
    err = capsys.readouterr().err
    assert "interrupted" in err and "Traceback" not in err


def test_an_export_job_is_watched_phase_by_phase_once_each_with_its_size(tmp_path):
    """ftui watch RUN/export/ID: a job header (no world_size / max_steps), each phase once (they
    printed at their start and again at their end), a small export's size in MiB (not 0.00 GiB,
    in whole MiB as every reader writes sizes: ftui.rundir.formats.fmt_bytes); the follower shows
    no loss or tokens/s figures for it. The job starts with the run_start export jobs wrote before
    job_start: a run directory from an older ftui reads the same."""
    import io

    from rich.console import Console

    from ftui.rundir.event_writer import EventWriter
    from ftui.cli.follow import follow_run

    job = tmp_path / "runs" / "base-1" / "export" / "x1"
    job.mkdir(parents=True)
    (job / "config.yaml").write_text("model_name_or_path: m\ndataset: d\n")
    with EventWriter(job / "events.jsonl") as w:
        w.write("run_start", run_id="x1", job="export", engine="export", precision="bf16", method="full", world_size=1, nodes=1,
                model="m", total_params=1000, trainable_params=0, max_steps=None, planned_tokens_per_step=0,
                source="base-1 final", out="/models/out")
        for phase in ("load", "save"):
            w.write("progress", phase=phase, done=0, total=1)
            w.write("progress", phase=phase, done=1, total=1)
        w.write("export", out="/models/out", files=["config.json", "model.safetensors"], bytes=5 * 2**20)
        w.write("run_end", status="completed", reason="exported base-1 final to /models/out")
    lines = subprocess.run([*FTUI, "watch", str(job)], capture_output=True, text=True, timeout=60).stdout.splitlines()
    assert lines[0] == "x1: export base-1 final bf16 out=/models/out"
    assert lines.count("loading the weights") == 1 and lines.count("writing safetensors") == 1
    assert "exported to /models/out: 2 files, 5 MiB" in lines and lines[-1] == "completed: exported base-1 final to /models/out"
    buffer = io.StringIO()
    follow_run(job, console=Console(file=buffer, width=200), poll_s=0.05)
    assert "tok/s" not in buffer.getvalue() and "loss" not in buffer.getvalue()


def test_version_prints_the_packages_version(capsys):
    from ftui import __version__
    from ftui.cli import main as cli

    with pytest.raises(SystemExit) as info:
        cli.main(["--version"])
    assert info.value.code == 0 and capsys.readouterr().out.strip() == f"ftui {__version__}"
