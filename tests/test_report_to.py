"""report_to: TensorBoard event files and W&B (offline) mirror the step and eval events."""

from __future__ import annotations

import importlib.util
import json
import struct
from pathlib import Path

import pytest

from conftest import steps_of, tiny_config, train_sync
from ftui.rundir.event_reader import read_all
from ftui.rundir.event_writer import EventWriter
from ftui.config.problems import ConfigError
from ftui.config.load import parse_config
from ftui.config.machine_checks import reporter_names


def read_scalars(folder: Path) -> dict[str, dict[int, float]]:
    """{tag: {step: value}} of the event files in ``folder``, read by TensorBoard's own reader."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder))
    acc.Reload()
    return {tag: {s.step: s.value for s in acc.Scalars(tag)} for tag in acc.Tags()["scalars"]}


def test_report_to_forms():
    assert reporter_names("none") == [] and reporter_names(None) == [] and reporter_names("") == []
    assert reporter_names("tensorboard, wandb") == ["tensorboard", "wandb"]
    assert reporter_names(["TensorBoard", "none"]) == ["tensorboard"]
    assert "tensorboard" in reporter_names("all")


def test_unknown_reporter_is_refused_by_name():
    with pytest.raises(ConfigError) as err:
        parse_config({"model_name_or_path": "ftui-demo", "model_init": "random", "dataset": "ftui_demo", "report_to": "tensorboard,mlflow"})
    assert "report_to" in str(err.value) and "mlflow" in str(err.value)


@pytest.mark.parametrize("package", ["wandb", "tensorboard"])
def test_a_reporter_without_its_package_is_refused(monkeypatch, package):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == package else real(name, *a))
    with pytest.raises(ConfigError) as err:
        parse_config({"model_name_or_path": "ftui-demo", "model_init": "random", "dataset": "ftui_demo", "report_to": package})
    assert f"pip install {package}" in str(err.value)


def test_a_failing_mirror_is_switched_off_with_a_warning(tmp_path):
    from ftui.runner.report import Reporters

    class Broken:
        name = "broken"

        def scalars(self, step, values, wall_time):
            raise RuntimeError("no room")

        def close(self, failed):
            pass

    writer = EventWriter(tmp_path / "events.jsonl")
    reporters = Reporters(writer, [Broken()])
    writer.mirrors.append(reporters)
    writer.write("eval", step=1, eval_loss=1.0)
    writer.write("eval", step=2, eval_loss=0.5)
    events = read_all(tmp_path / "events.jsonl")
    assert [e["event"] for e in events] == ["eval", "log", "eval"]
    assert "report_to broken failed" in events[1]["message"] and not reporters.sinks


@pytest.fixture(scope="module")
def mirrored_run(tmp_path_factory):
    """One run mirrored to both reporters (W&B offline), 4 steps with an eval every 2: (the
    run, its events). One run for both tests (CI time: a run's start-up is most of its cost)."""
    pytest.importorskip("tensorboard", reason="report_to tensorboard: the tensorboard package is not installed (a test dependency)")
    pytest.importorskip("wandb", reason="report_to wandb: the wandb package is not installed (a test dependency)")
    tmp_path = tmp_path_factory.mktemp("mirrored")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("WANDB_MODE", "offline")
        env.setenv("WANDB_SILENT", "true")
        run_dir, events, proc = train_sync(tiny_config(tmp_path, report_to="tensorboard,wandb", max_steps=4, val_size=0.25, eval_steps=2))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not [e for e in events if e["event"] == "log" and "report_to" in e.get("message", "")]  # neither switched off
    return run_dir, events


@pytest.mark.dist
def test_tensorboard_event_files_hold_the_step_and_eval_figures(mirrored_run):
    run_dir, events = mirrored_run
    steps = steps_of(events)
    evals = [e for e in events if e["event"] == "eval"]
    assert len(steps) == 4 and len(evals) == 2
    scalars = read_scalars(run_dir / "tensorboard")
    assert scalars["train/loss"] == pytest.approx({e["step"]: e["loss"] for e in steps}, rel=1e-6)
    assert scalars["train/learning_rate"] == pytest.approx({e["step"]: e["lr"] for e in steps}, rel=1e-6)
    assert scalars["train/tokens_per_s"] == pytest.approx({e["step"]: e["tokens_per_s"] for e in steps}, rel=1e-6)
    assert scalars["eval/loss"] == pytest.approx({e["step"]: e["eval_loss"] for e in evals}, rel=1e-6)


def wandb_history(run_file: Path) -> dict[int, dict[str, float]]:
    """{step: {key: value}} of a .wandb file's history records (a LevelDB-style log of W&B's
    Record protobufs: a 7-byte header, then in 32 KiB blocks chunks of crc, length, type, data)."""
    from wandb.proto import wandb_internal_pb2

    data = run_file.read_bytes()[7:]
    records, pending, i = [], b"", 0
    while i + 7 <= len(data):
        room = 32768 - (i + 7) % 32768  # offsets count from the file's start
        if room < 7:
            i += room
            continue
        length, kind = struct.unpack("<HB", data[i + 4:i + 7])
        chunk, i = data[i + 7:i + 7 + length], i + 7 + length
        pending += chunk
        if kind in (1, 4):  # full, last
            records.append(pending)
            pending = b""
    history: dict[int, dict[str, float]] = {}
    for raw in records:
        record = wandb_internal_pb2.Record()
        record.ParseFromString(raw)
        if record.WhichOneof("record_type") == "history":
            row = history.setdefault(record.history.step.num, {})
            for item in record.history.item:
                row[item.key or "/".join(item.nested_key)] = json.loads(item.value_json)
    return history


@pytest.mark.dist
def test_wandb_offline_writes_the_run_with_its_history(mirrored_run):
    run_dir, events = mirrored_run
    (folder,) = (run_dir / "wandb").glob("offline-run-*")
    (run_file,) = folder.glob("run-*.wandb")
    history = wandb_history(run_file)
    for e in steps_of(events):
        assert history[e["step"]]["train/loss"] == pytest.approx(e["loss"])
        assert history[e["step"]]["train/learning_rate"] == pytest.approx(e["lr"])
    evals = [e for e in events if e["event"] == "eval"]
    assert len(evals) == 2
    for ev in evals:
        assert history[ev["step"]]["eval/loss"] == pytest.approx(ev["eval_loss"])


def test_the_launch_form_keeps_report_to():
    """A YAML's report_to (a list too) fills the form's field and comes back out of it."""
    from ftui.tui.screens.launch_fields import config_to_form, form_to_config

    values = config_to_form({"report_to": ["tensorboard", "wandb"], "finetuning_type": "lora"})
    assert values["report_to"] == "tensorboard,wandb"
    assert form_to_config({"report_to": "tensorboard"})["report_to"] == "tensorboard"
    assert "report_to" not in form_to_config({"report_to": " "})  # empty: the default, none
