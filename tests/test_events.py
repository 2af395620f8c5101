"""The event schema v1 and its tolerant incremental reader."""

import json

import pytest

from ftui.rundir.event_reader import EventReader, read_all
from ftui.rundir.event_writer import EventWriter
from ftui.rundir.events import make_event, validate_event


def step_fields(**over):
    f = dict(step=1, epoch=0.1, loss=2.0, lr=1e-4, grad_norm=1.0, tokens=100, trainable_tokens=40,
             tokens_per_s=1000.0, step_time_s=0.1, mfu=None, loss_scale=None,
             mem=[{"rank": 0, "allocated": 1, "reserved": 2, "peak": 3}])
    f.update(over)
    return f


def test_make_event_rejects_missing_fields_and_bad_status():
    with pytest.raises(ValueError, match="lacks field 'tokens'"):
        make_event("step", **{k: v for k, v in step_fields().items() if k != "tokens"})
    with pytest.raises(ValueError, match="status"):
        make_event("run_end", status="exploded", reason="x")
    with pytest.raises(ValueError, match="unknown event kind"):
        make_event("nonsense")
    ev = make_event("step", **step_fields())
    assert ev["v"] == 1 and ev["event"] == "step" and validate_event(ev) == []


def test_writer_turns_nan_into_null_so_every_line_is_json(tmp_path):
    path = tmp_path / "events.jsonl"
    with EventWriter(path) as w:
        w.write("step", **step_fields(loss=float("nan"), grad_norm=float("inf")))
    line = path.read_text().strip()
    assert "NaN" not in line and "Infinity" not in line
    ev = json.loads(line)
    assert ev["loss"] is None and ev["grad_norm"] is None


def test_reader_skips_torn_last_line_and_resumes_from_its_offset(tmp_path):
    path = tmp_path / "events.jsonl"
    w = EventWriter(path)
    w.write("log", level="info", message="one")
    reader = EventReader(path)
    assert [e["message"] for e in reader.read_new()] == ["one"]
    offset = reader.offset
    full = json.dumps(make_event("log", level="info", message="two"))
    with open(path, "a") as fh:  # a writer halfway through a line
        fh.write(full[:10])
    assert reader.read_new() == []
    with open(path, "a") as fh:
        fh.write(full[10:] + "\n")
    assert [e["message"] for e in reader.read_new()] == ["two"]
    assert reader.offset == path.stat().st_size > offset
    assert reader.read_new() == []  # nothing new: nothing re-read


def test_reader_skips_garbage_unknown_kinds_and_versions(tmp_path):
    path = tmp_path / "events.jsonl"
    good = json.dumps(make_event("log", level="warning", message="ok"))
    path.write_text("\n".join([
        "not json", json.dumps({"v": 2, "t": 1, "event": "log"}), json.dumps({"v": 1, "t": 1, "event": "future_kind"}),
        "[1,2]", good, "",
    ]) + "\n")
    reader = EventReader(path)
    assert [e["message"] for e in reader.read_new()] == ["ok"]
    assert reader.skipped == 4


def test_reader_of_missing_file_is_empty(tmp_path):
    assert read_all(tmp_path / "nope.jsonl") == []


def test_compact_reading_gives_the_same_curves_as_full_parsing(tmp_path):
    from ftui.rundir.event_reader import StepColumns

    path = tmp_path / "events.jsonl"
    with EventWriter(path) as w:
        w.write("run_start", run_id="r", engine="single", precision="fp32", method="full", world_size=1, nodes=1,
                model="m", total_params=1, trainable_params=1, max_steps=300, planned_tokens_per_step=1)
        for s in range(1, 301):
            w.write("step", **step_fields(step=s, loss=None if s == 150 else 1.0 / s, lr=1e-4 * (1 - s / 300)))
            if s % 100 == 0:
                w.write("eval", step=s, eval_loss=0.5)
    with open(path, "a") as fh:  # a line from another writer: other key order, spaces
        fh.write(json.dumps({"event": "step", "v": 1, "t": 9.0, **{k: v for k, v in step_fields(step=301, loss=0.25).items()}}) + "\n")
    full = [(e["step"], e["loss"], e["lr"]) for e in read_all(path) if e["event"] == "step"]
    reader = EventReader(path)
    got, kinds = [], []
    while True:
        batch = reader.read_new(4096, compact=True)  # small chunks: many segments
        if not batch:
            break
        for e in batch:
            if isinstance(e, StepColumns):
                kinds.append("columns")
                got += [(s, None if v != v else v, lr) for s, v, lr in zip(e.step, e.loss, e.lr)]
            else:
                kinds.append(e["event"])
                if e["event"] == "step":
                    got.append((e["step"], e["loss"], e["lr"]))
    assert got == full
    assert "columns" in kinds and kinds.count("eval") == 3 and kinds[0] == "run_start"


def test_log_tailer_reads_only_new_complete_lines_and_starts_near_the_end(tmp_path):
    from ftui.rundir.log_tail import LogTailer

    log = tmp_path / "train.log"
    log.write_text("".join(f"old line {i}\n" for i in range(1000)))
    tail = LogTailer(log, backlog=100)
    first = tail.read_new()
    assert first and first[-1] == "old line 999" and len(first) < 20 and all(l.startswith("old line") for l in first)
    with open(log, "a") as fh:
        fh.write("progress 10%\rprogress 90%\nhalf")
    assert tail.read_new() == ["progress 90%"]  # \r redraws keep the last state; "half" waits
    with open(log, "a") as fh:
        fh.write(" done\n")
    assert tail.read_new() == ["half done"]
    assert tail.read_new() == []


def test_extra_figures_are_the_unknown_finite_numbers_with_printable_short_names():
    from ftui.rundir.events import MAX_EXTRA_FIGURES, extra_figures

    step = make_event("step", step=3, epoch=0.1, loss=1.0, lr=1e-4, grad_norm=1.0, tokens=10, trainable_tokens=5,
                      tokens_per_s=9.0, step_time_s=1.0, mfu=None, loss_scale=None, mem=[], window_steps=1,
                      total_tokens=10, data_wait_s=0.0, skipped=False)
    assert extra_figures(step) == ()  # every field the runner writes today has its own place
    step.update({"rewards/accuracies": 0.75, "count": 7, "flag": True, "inf": float("inf"), "huge": 1 << 70,
                 "text": "1.0", "\x1b[2J": 1.0, "x" * 41: 1.0, "": 1.0})
    assert extra_figures(step) == (("rewards/accuracies", 0.75), ("count", 7))
    step.update({f"f{i}": float(i) for i in range(20)})
    assert len(extra_figures(step)) == MAX_EXTRA_FIGURES
    assert extra_figures(make_event("eval", step=3, eval_loss=1.0, eval_tokens=5, **{"eval_rewards/margins": 1.2})) == (
        ("eval_rewards/margins", 1.2),)
