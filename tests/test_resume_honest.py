"""Issue 39, finding 7: a resume says what changed and changes nothing in the run it refuses.

A resume compares the run's config and data fingerprint (recorded at the start) with what it
is about to use: another base model or other records are refused unless --allow-changed;
other keys are noted; replacing later checkpoints and final/ is said first; a refused resume
leaves config.yaml, the events and the status as they were; a job reading the run refuses
it; trust_remote_code is warned on every path that starts or resumes a run.

Most tests resume a run made by prepare_run with a checkpoint's trainer_state.json alone:
every refusal happens before a job starts, and where a resume is accepted the job's start
is replaced (start_run records what it got). One test trains a tiny run for real.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import tiny_config, train_sync
from ftui.cli import main as cli
from ftui.rundir.events import make_event
from ftui.jobs import launch
from ftui.jobs.launch import prepare_run
from ftui.rundir.paths import DATA_FINGERPRINT_FILE, DEMO_DATASET_FILE, DEMO_MODEL_DIR
from ftui.rundir.follower import summarize_run
from fixtures_runs import T0

RECORDS = json.loads(DEMO_DATASET_FILE.read_text())


def _dataset(tmp_path: Path, n: int = 40) -> Path:
    path = tmp_path / "qa.json"
    path.write_text(json.dumps(RECORDS[:n], indent=1))
    return path


def _run(tmp_path: Path, status: str = "completed", **overrides) -> Path:
    """A run as prepare_run makes it (config and fingerprint), with checkpoints step-2 and
    step-4 saved with micro batch 4 x 1 on the single engine, ended ``status``."""
    data = overrides.pop("dataset", None) or str(_dataset(tmp_path))
    run = prepare_run(tiny_config(tmp_path, dataset=data, max_steps=4, **overrides))
    for step in (2, 4):
        ckpt = run / "checkpoints" / f"step-{step}"
        ckpt.mkdir(parents=True)
        (ckpt / "trainer_state.json").write_text(json.dumps({
            "format": 1, "step": step, "engine": "single", "world_size": 1, "micro_batch_size": 4,
            "accumulation": 1, "max_steps": 4, "files": {}}))
    (run / "final").mkdir()
    (run / "events.jsonl").write_text(json.dumps(make_event("run_end", t=T0, status=status, reason=status)) + "\n")
    return run


def _snapshot(run: Path) -> dict[str, bytes]:
    return {name: (run / name).read_bytes() for name in ("config.yaml", "events.jsonl", DATA_FINGERPRINT_FILE)
            if (run / name).exists()}


@pytest.fixture
def started(monkeypatch):
    """start_run replaced: what an accepted resume would start with (nothing runs)."""
    calls: list[dict] = []

    def fake_start(run_dir, cfg, extra_env=None, resume=None, lock=None, job="train"):
        if lock is not None:
            os.close(lock)
        calls.append({"run": run_dir, "cfg": cfg, "resume": resume})
        return {"command_line": "", "pid": 0}

    monkeypatch.setattr(launch, "start_run", fake_start)
    return calls


def _resume(run: Path, *more: str) -> int:
    return cli.main(["train", "--resume", str(run), "--detach", *more])


def _err(capsys) -> str:
    return " ".join(capsys.readouterr().err.split())


def test_the_start_records_each_dataset_file_s_path_size_and_sha256(tmp_path):
    data = _dataset(tmp_path)
    run = prepare_run(tiny_config(tmp_path, dataset=str(data), eval_dataset="ftui_demo"))
    fingerprint = json.loads((run / DATA_FINGERPRINT_FILE).read_text())
    train, evaluate = fingerprint["datasets"]
    assert train == {"role": "dataset", "name": str(data), "path": str(data), "size": data.stat().st_size,
                     "sha256": hashlib.sha256(data.read_bytes()).hexdigest()}
    assert evaluate["role"] == "eval_dataset" and evaluate["path"] == str(DEMO_DATASET_FILE)
    assert evaluate["sha256"] == hashlib.sha256(DEMO_DATASET_FILE.read_bytes()).hexdigest()


@pytest.mark.parametrize("change", ["replaced", "cut"])
def test_changed_records_are_refused_naming_the_file_and_nothing_is_written(tmp_path, capsys, started, change):
    run = _run(tmp_path, status="stopped")
    data = tmp_path / "qa.json"
    if change == "replaced":  # the same size, other records: two answers swapped
        records = RECORDS[:40]
        records[0]["output"], records[1]["output"] = records[1]["output"], records[0]["output"]
        data.write_text(json.dumps(records, indent=1))
        assert data.stat().st_size == json.loads((run / DATA_FINGERPRINT_FILE).read_text())["datasets"][0]["size"]
    else:  # 40 records cut to 3
        data.write_text(json.dumps(RECORDS[:3], indent=1))
    before = _snapshot(run)
    (run / "stop_requested").write_text("")
    assert _resume(run) == 2
    err = _err(capsys)
    assert str(data) in err and "--allow-changed" in err and "nothing was changed" in err
    assert ("records replaced" in err) if change == "replaced" else ("size" in err and "records changed" in err)
    assert _snapshot(run) == before and (run / "stop_requested").exists() and not started
    assert summarize_run(run).status == "stopped"

    assert _resume(run, "--allow-changed") == 0  # the user said so: it goes on, and the new files are recorded
    assert started and str(data) in _err(capsys)
    assert json.loads((run / DATA_FINGERPRINT_FILE).read_text())["datasets"][0]["sha256"] == hashlib.sha256(data.read_bytes()).hexdigest()
    assert not (run / "stop_requested").exists()


def test_another_base_model_is_refused_and_other_keys_are_noted(tmp_path, capsys, started):
    run = _run(tmp_path, status="stopped", model_name_or_path="ftui-demo")
    before = _snapshot(run)
    assert _resume(run, "--set", f"model_name_or_path={DEMO_MODEL_DIR}", "--set", "learning_rate=0.001") == 2
    err = _err(capsys)
    assert f"model_name_or_path: 'ftui-demo' -> '{DEMO_MODEL_DIR}'" in err and "--allow-changed" in err
    assert "learning_rate: 0.005 -> 0.001" in err
    assert _snapshot(run) == before and not started

    assert _resume(run, "--set", f"model_name_or_path={DEMO_MODEL_DIR}", "--allow-changed") == 0
    assert started[0]["cfg"].model_name_or_path == str(DEMO_MODEL_DIR)
    assert "changes you allowed" in _err(capsys)
    assert f"model_name_or_path: {DEMO_MODEL_DIR}" in (run / "config.yaml").read_text()


def test_a_run_without_a_fingerprint_says_so_once_and_goes_on(tmp_path, capsys, started):
    run = _run(tmp_path, status="stopped")
    (run / DATA_FINGERPRINT_FILE).unlink()  # a run from before ftui recorded one
    assert _resume(run) == 0 and len(started) == 1
    assert _err(capsys).count("has no data fingerprint") == 1
    assert (run / DATA_FINGERPRINT_FILE).is_file()
    assert _resume(run) == 0 and "has no data fingerprint" not in _err(capsys)


def test_replacing_a_completed_run_s_later_checkpoints_and_final_is_said_first(tmp_path, capsys, started):
    run = _run(tmp_path)
    assert _resume(run, "--checkpoint", "2", "--set", "max_steps=6") == 0
    err = _err(capsys)
    assert "from step-2 replaces" in err and "step-4" in err and "final/" in err
    assert started[0]["resume"].name == "step-2"


def test_a_refused_bad_override_leaves_a_completed_run_completed(tmp_path, capsys, started):
    """--set per_device_train_batch_size=2 against checkpoints of 4 used to rewrite config.yaml,
    fail the run and advise a resume that failed the same way."""
    run = _run(tmp_path)
    before = _snapshot(run)
    assert _resume(run, "--set", "per_device_train_batch_size=2", "--set", "max_steps=6") == 2
    err = _err(capsys)
    assert "saved with micro batch 4 x accumulation 1; this config has 2 x 1" in err
    assert "another checkpoint" not in err
    assert _snapshot(run) == before and summarize_run(run).status == "completed" and not started
    assert _resume(run, "--set", "max_steps=6") == 0 and started  # what it advised works


def test_a_resume_while_a_predict_job_reads_the_run_is_refused_naming_the_job(tmp_path, capsys, started):
    run = _run(tmp_path)
    job = run / "predict" / "20261127-090000"
    job.mkdir(parents=True)
    fd = os.open(job / "job.lock", os.O_RDWR | os.O_CREAT, 0o600)
    before = _snapshot(run)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # the predict job's supervisor holds it while it reads final/
        assert _resume(run, "--set", "max_steps=6") == 2
        err = _err(capsys)
        assert "predict job running" in err and str(job) in err
        assert _snapshot(run) == before and not started
    finally:
        os.close(fd)
    assert _resume(run, "--set", "max_steps=6") == 0  # the job ended


def test_trust_remote_code_is_warned_on_resume_and_join(tmp_path, capsys, started):
    run = _run(tmp_path, status="stopped")
    assert _resume(run, "--set", "trust_remote_code=true") == 0
    assert _err(capsys).count("trust_remote_code is on") == 1
    # node 1 joining a two-node run with trust_remote_code in its config.yaml
    two = prepare_run(tiny_config(tmp_path / "two", engine="ddp", nproc_per_node=1, nnodes=2, rdzv_endpoint="127.0.0.1:29555",
                                  trust_remote_code=True, run_name="two"))
    (two / "launch.json").write_text("{}")  # node 0 started it
    assert cli.main(["train", str(two / "config.yaml"), "--node-rank", "1", "--detach"]) == 0
    assert "trust_remote_code is on" in _err(capsys)


def test_the_runner_s_hint_for_a_mismatched_checkpoint_asks_for_the_settings_not_another_checkpoint(tmp_path):
    from ftui.runner.faults import hint_for
    from ftui.rundir.checkpoints import CheckpointMismatch

    cfg = tiny_config(tmp_path)
    hint = hint_for(CheckpointMismatch("step-4 was saved with micro batch 4"), cfg, "train", tmp_path / "run-1")
    assert "another checkpoint" not in hint and "ftui train --resume run-1 --set" in hint


def test_a_real_resume_with_a_refused_batch_then_the_advised_one_trains_on(tmp_path):
    """A trained run: the refused override leaves it completed; the advised resume trains."""
    run, _events, proc = train_sync(tiny_config(tmp_path, max_steps=4, save_steps=2))
    assert proc.returncode == 0, proc.stderr[-3000:]
    config = (run / "config.yaml").read_bytes()
    ftui = [sys.executable, "-m", "ftui.cli.main", "train", "--resume", str(run)]
    refused = subprocess.run([*ftui, "--set", "per_device_train_batch_size=2", "--set", "max_steps=6"],
                             capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and "Resume with the batch settings it was saved with" in refused.stderr
    assert (run / "config.yaml").read_bytes() == config and summarize_run(run).status == "completed"
    resumed = subprocess.run([*ftui, "--set", "max_steps=6"], capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert "replaces what it has after that step: final/" in " ".join(resumed.stderr.split())
    assert summarize_run(run).status == "completed" and summarize_run(run).step == 6
    # the command returned once the job's processes had exited (ftui.cli.following.wait_for_exit): nothing
    # writes in the run any more, so it can go at once (it met "Directory not empty" when the command
    # returned at run_end; tests/test_follow_exit.py)
    from ftui.rundir.liveness import launcher_gone

    assert launcher_gone(run)
    shutil.rmtree(run)


@pytest.mark.parametrize("settings, saved, says", [
    ({"engine": "ddp", "nproc_per_node": 2}, {}, "written by engine single, this run uses ddp"),
    ({"engine": "zero2", "nproc_per_node": 2}, {"engine": "zero2", "world_size": 4}, "written by 4 DeepSpeed ranks, this run has 2"),
    ({"gradient_accumulation_steps": 2}, {}, "micro batch 4 x accumulation 1; this config has 4 x 2"),
    ({}, {}, None),
])
def test_the_checkpoint_check_before_writing_is_the_runner_s_rule(tmp_path, settings, saved, says):
    """resume_checks.checkpoint_mismatch is what runner.checkpoint.load_checkpoint raises on,
    so the CLI refuses what the runner would, before it writes anything."""
    from ftui.rundir.resume_checks import checkpoint_mismatch

    state = {"engine": "single", "world_size": 1, "micro_batch_size": 4, "accumulation": 1, **saved}
    found = checkpoint_mismatch("step-4", state, tiny_config(tmp_path, **settings))
    assert (found is None) if says is None else (says in found)


def test_llamafactory_s_resume_from_checkpoint_is_checked_alike(tmp_path, capsys, started):
    """`ftui train CONFIG` with resume_from_checkpoint resumes through the same checks: the
    YAML's other base model is refused unless --allow-changed, trust_remote_code said once."""
    import yaml

    run = _run(tmp_path, status="stopped")
    data = yaml.safe_load((run / "config.yaml").read_text())
    data.update(model_name_or_path=str(DEMO_MODEL_DIR), trust_remote_code=True, resume_from_checkpoint=str(run))
    config = tmp_path / "lf.yaml"
    config.write_text(yaml.safe_dump(data))
    before = _snapshot(run)
    assert cli.main(["train", str(config), "--detach"]) == 2
    assert "model_name_or_path: 'ftui-demo' ->" in _err(capsys) and _snapshot(run) == before and not started
    assert cli.main(["train", str(config), "--detach", "--allow-changed"]) == 0
    assert _err(capsys).count("trust_remote_code is on") == 1 and started[0]["resume"].name == "step-4"


def test_a_long_dataset_path_is_named_whole():
    """A difference names the file: a path past the 80 characters other values are cut at (a CI
    machine's temporary folders are that deep) is shown whole."""
    from ftui.rundir.resume_checks import fingerprint_changes

    path = "/" + "/".join(["a-rather-deep-folder"] * 8) + "/qa.json"
    old = {"datasets": [{"role": "train", "name": path, "path": path, "size": 10, "sha256": "x"}]}
    new = {"datasets": [{"role": "train", "name": path, "path": path, "size": 10, "sha256": "y"}]}
    lines = fingerprint_changes(old, new)
    assert len(path) > 80 and lines and all(path in line for line in lines), lines


def test_a_long_base_model_path_is_named_whole():
    """The guarded keys name a model or a dataset: a path past short_repr's cut is shown whole."""
    from ftui.rundir.resume_checks import shown_path

    path = "/" + "/".join(["a-rather-deep-model-folder"] * 8)
    assert len(path) > 200 and path in shown_path(path)
