"""The rollouts file (ftui.rundir.rollouts, interface 4): what the writer keeps (texts cut at
a cap, NaN as null), its rotation at the cap (at most two files, the oldest rollouts
dropped), and the reader of an untrusted file (torn lines, hostile types, too much of it);
the browser's and the CLI's selection (ftui.rundir.rollout_query)."""

from __future__ import annotations

import json
import math

from ftui.rundir import rollouts as ro
from ftui.rundir.rollout_query import parse_query, select
from ftui.rundir.rollouts import OLDER_FILE, ROLLOUTS_FILE, RolloutTail, RolloutWriter, read_rollouts, writes_rollouts
from tests.rollout_runs import ROWS, rollout


def test_rows_round_trip_with_their_types(tmp_path):
    with RolloutWriter(tmp_path) as w:
        w.write(ROWS)
    rows = read_rollouts(tmp_path)
    assert [r["completion"] for r in rows] == [r["completion"] for r in ROWS]
    assert rows[3]["reward"] is None and rows[3]["rewards"] == {"accuracy": None, "format": 0.5}
    assert rows[0]["rewards"] == {"accuracy": 1.0, "format": 0.5} and rows[0]["reward"] == 1.5
    assert rows[4]["truncated"] is True and rows[4]["length"] == 256 and rows[4]["cut"] is False
    assert (tmp_path / ROLLOUTS_FILE).read_text().count("\n") == len(ROWS)


def test_writer_cuts_long_texts_and_stores_nan_as_null(tmp_path):
    long = "x" * (ro.TEXT_CAP + 10)
    with RolloutWriter(tmp_path) as w:
        w.write([rollout(1, 0, 0, long, float("nan"), advantage=float("inf"))])
    line = (tmp_path / ROLLOUTS_FILE).read_text()
    assert "NaN" not in line and "Infinity" not in line  # standard JSON
    (row,) = read_rollouts(tmp_path)
    assert len(row["completion"]) == ro.TEXT_CAP and row["cut"] is True
    assert row["rewards"]["accuracy"] is None and row["advantage"] == 0.0


def test_rotation_at_the_cap_keeps_two_files_and_drops_the_oldest(tmp_path):
    one = len(json.dumps(ro.storable(rollout(1, 0, 0, "a" * 100, 1.0)), separators=(",", ":"))) + 1
    with RolloutWriter(tmp_path, cap_bytes=one * 3) as w:
        for step in range(1, 11):  # 10 rows, 3 fit a file
            w.write([rollout(step, 0, 0, "a" * 100, 1.0)])
            assert (tmp_path / ROLLOUTS_FILE).stat().st_size <= one * 3
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([OLDER_FILE, ROLLOUTS_FILE])
    steps = [r["step"] for r in read_rollouts(tmp_path)]
    assert steps == [7, 8, 9, 10]  # older: 7, 8, 9; current: 10; steps 1-6 dropped


def test_writer_takes_numpy_scalars(tmp_path):
    import numpy as np

    with RolloutWriter(tmp_path) as w:
        w.write([rollout(np.int64(2), 0, 0, "a", np.float32(0.5), advantage=np.float64(0.25), length=np.int32(3),
                         truncated=np.bool_(True))])
    (row,) = read_rollouts(tmp_path)
    assert (row["step"], row["rewards"]["accuracy"], row["advantage"], row["length"], row["truncated"]) == (2, 0.5, 0.25, 3, True)


def test_a_resumed_writer_appends_and_a_rollout_written_again_is_read_once(tmp_path):
    with RolloutWriter(tmp_path) as w:
        w.write(ROWS[:3])
    with RolloutWriter(tmp_path) as w:  # resumed from a checkpoint before ROWS[1]'s step: written again
        w.write([{**ROWS[1], "completion": "again"}, ROWS[3]])
    assert [r["completion"] for r in read_rollouts(tmp_path)] == [ROWS[0]["completion"], "again", ROWS[2]["completion"],
                                                                  ROWS[3]["completion"]]


def test_reader_skips_torn_and_hostile_lines(tmp_path):
    good = json.dumps(ro.storable(ROWS[0]))
    bad_rows = [
        {**ROWS[0], "step": "1"}, {**ROWS[0], "step": True}, {**ROWS[0], "step": -1}, {**ROWS[0], "completion": 5},
        {**ROWS[0], "rewards": [1, 2]}, {**ROWS[0], "rewards": {"\x1b[2J": 1.0}}, {**ROWS[0], "rewards": {"a": "high"}},
        {**ROWS[0], "reward": "1"}, {**ROWS[0], "advantage": None}, {**ROWS[0], "truncated": 1},
        {**ROWS[0], "reference": {"x": 1}}, {**ROWS[0], "rewards": {f"f{i}": 1.0 for i in range(ro.MAX_REWARDS + 1)}},
        [1, 2, 3], "a string", None,
    ]
    lines = [good, "{not json", *(json.dumps(r) for r in bad_rows), '{"step": 1e999}', "[" * 100_000, "", good]
    (tmp_path / ROLLOUTS_FILE).write_text("\n".join(lines) + "\n" + good[:40])  # the last line torn
    tail = RolloutTail(tmp_path)
    rows, reset = tail.poll()
    assert reset and len(rows) == 2 and rows[0] == rows[1]
    assert tail.skipped == 3 + len(bad_rows)  # not JSON, 1e999, too deep, the bad rows
    with open(tmp_path / ROLLOUTS_FILE, "a") as fh:  # the torn line completed: read by the next poll
        fh.write(good[40:] + "\n")
    more, reset = tail.poll()
    assert not reset and len(more) == 1 and more[0]["completion"] == ROWS[0]["completion"]
    assert tail.poll() == ([], False)


def test_reader_bounds_what_it_reads(tmp_path, monkeypatch):
    monkeypatch.setattr(ro, "MAX_ROWS", 5)
    monkeypatch.setattr(ro, "LINE_CAP", 1000)
    with RolloutWriter(tmp_path) as w:
        w.write([rollout(s, 0, 0, "ok", 1.0) for s in range(1, 21)])
        w.write([rollout(21, 0, 0, "y" * 5000, 1.0)])  # a line past LINE_CAP: skipped
        w.write([rollout(22, 0, 0, "ok", 1.0)])
    tail = RolloutTail(tmp_path)
    rows, _reset = tail.poll()
    assert [r["step"] for r in rows] == [17, 18, 19, 20, 22] and tail.skipped == 1
    monkeypatch.setattr(ro, "READ_CAP", 1000)  # a file larger than READ_CAP: only its newest part
    assert [r["step"] for r in read_rollouts(tmp_path)][-1] == 22 and len(read_rollouts(tmp_path)) < 10


def test_the_tail_reads_both_files_again_after_a_rotation(tmp_path):
    one = len(json.dumps(ro.storable(rollout(1, 0, 0, "a", 1.0)), separators=(",", ":"))) + 1
    tail = RolloutTail(tmp_path)
    assert tail.poll() == ([], True)  # no file yet: the first poll tells all there is
    assert tail.poll() == ([], False)
    with RolloutWriter(tmp_path, cap_bytes=one * 2) as w:
        w.write([rollout(1, 0, 0, "a", 1.0)])
        assert [r["step"] for r in tail.poll()[0]] == [1]
        w.write([rollout(2, 0, 0, "a", 1.0)])
        assert [r["step"] for r in tail.poll()[0]] == [2]
        w.write([rollout(3, 0, 0, "a", 1.0)])  # rotates
        rows, reset = tail.poll()
        assert reset and [r["step"] for r in rows] == [1, 2, 3]


def test_which_runs_have_rollouts(tmp_path):
    (tmp_path / "sft").mkdir()
    (tmp_path / "sft" / "config.yaml").write_text("stage: sft\n")
    (tmp_path / "grpo").mkdir()
    (tmp_path / "grpo" / "config.yaml").write_text("stage: grpo\n")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "config.yaml").write_text("stage: [unclosed\n")
    (tmp_path / "file").mkdir()
    (tmp_path / "file" / ROLLOUTS_FILE).write_text("")
    assert [writes_rollouts(tmp_path / n) for n in ("sft", "grpo", "bad", "file", "none")] == [False, True, False, True, False]


def test_select_sorts_by_reward_searches_and_filters_steps():
    rows = [rollout(1, 0, 0, "alpha", 0.5), rollout(2, 0, 0, "Beta", 1.0), rollout(2, 0, 1, "gamma", None),
            rollout(3, 0, 0, "beta two", 0.0)]
    assert select(rows) == [3, 1, 2, 0]  # newest step first, file order within a step
    assert select(rows, sort="step") == [0, 1, 2, 3]
    assert select(rows, sort="reward") == [1, 0, 3, 2]  # highest first, no reward last
    assert select(rows, sort="low-reward") == [3, 0, 1, 2]
    assert select(rows, "BETA", sort="step") == [1, 3]
    assert select(rows, "step:2") == [1, 2] and select(rows, "step:2-3 beta", sort="step") == [1, 3]
    assert select(rows, step=1) == [0]
    assert select(rows, "what is 0", sort="step") == [0, 1, 2, 3]  # the prompt is searched too
    assert parse_query("step:3 foo  Bar") == ((3, 3), "foo bar") and math.isfinite(1.0)


def test_a_fifo_or_a_device_is_refused_not_read(tmp_path):
    import os

    os.mkfifo(tmp_path / ROLLOUTS_FILE)  # a reader that opened it would wait for a writer forever
    tail = RolloutTail(tmp_path)
    assert tail.poll() == ([], True) and "FIFO" in tail.problem
    os.remove(tmp_path / ROLLOUTS_FILE)
    os.symlink("/dev/zero", tmp_path / OLDER_FILE)  # endless: refused before a byte is read
    tail = RolloutTail(tmp_path)
    assert tail.poll() == ([], True) and "device" in tail.problem
    os.remove(tmp_path / OLDER_FILE)
    os.mkfifo(tmp_path / "config.yaml")  # the stage's question does not hang on it either
    assert writes_rollouts(tmp_path) is False
