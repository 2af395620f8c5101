"""Files ftui reads back from a run directory or from beside an export (its markers, an export
job's job.json, a run's data fingerprint) are untrusted like any run file: one nested deeper
than Python's stack, or of the wrong shape, is read as "not ftui's" (kept, not followed), never
a RecursionError or AttributeError traceback from ``ftui runs``, ``ftui export --force`` or a
resume. Where the five parts of issue 39 meet: the O_NOFOLLOW marker read that
``ftui.safety.owned_dirs`` and ``ftui.safety.export_out`` share (``open_marker``) and the bounded JSON
reader (``ftui.safety.bounded_input.load_json``)."""

from __future__ import annotations

import json
import os

DEEP = "[" * 60_000  # deeper than json.loads follows; smaller than either marker's size bound


def test_a_leftover_pattern_directory_with_a_too_deep_marker_is_kept_and_the_sweep_goes_on(tmp_path):
    from ftui.safety.export_out import sweep_leftovers
    from ftui.safety.owned_dirs import MARKER

    odd = tmp_path / ".model.ftui-export-abc"
    odd.mkdir()
    (odd / MARKER).write_text(DEEP)
    (odd / "weights.bin").write_bytes(b"mine")
    assert sweep_leftovers(tmp_path) is None
    assert (odd / "weights.bin").read_bytes() == b"mine"


def test_force_onto_a_folder_with_a_too_deep_export_marker_is_refused_in_a_line(tmp_path):
    from ftui.safety.export_out import EXPORT_MARKER, replace_problem

    out = tmp_path / "out"
    out.mkdir()
    (out / EXPORT_MARKER).write_text(DEEP)
    (out / "notes.txt").write_text("mine")
    problem = replace_problem(out)
    assert problem is not None and "notes.txt" in problem and EXPORT_MARKER in problem


def test_ftui_runs_reads_past_export_job_specs_that_are_too_deep_or_not_mappings(tmp_path, capsys):
    from ftui.cli.main import main
    from ftui.jobs.export import export_job_out_parents
    from ftui.rundir.paths import EXPORT_DIR, JOB_SPEC_FILE
    from tests.fixtures_runs import write_run

    root = tmp_path / "runs"
    run = write_run(root, "done-1", steps=3, max_steps=3, end="completed")
    for name, text in (("a-deep", DEEP), ("b-list", "[1, 2]"), ("c-good", json.dumps({"out": str(tmp_path / "x" / "m")}))):
        (run / EXPORT_DIR / name).mkdir(parents=True)
        (run / EXPORT_DIR / name / JOB_SPEC_FILE).write_text(text)
    assert tmp_path / "x" in export_job_out_parents([run])
    assert main(["runs", "--root", str(root)]) == 0
    assert "done-1" in capsys.readouterr().out


def test_a_too_deep_data_fingerprint_reads_as_none(tmp_path):
    from ftui.data import fingerprint as data_fingerprint
    from ftui.rundir.paths import DATA_FINGERPRINT_FILE

    (tmp_path / DATA_FINGERPRINT_FILE).write_text(DEEP)
    assert data_fingerprint.read(tmp_path) is None
    fifo_run = tmp_path / "fifo-run"  # a FIFO in its place: refused, not waited on
    fifo_run.mkdir()
    os.mkfifo(fifo_run / DATA_FINGERPRINT_FILE)
    assert data_fingerprint.read(fifo_run) is None


def test_an_earlier_export_left_aside_by_a_killed_force_export_is_put_back_not_swept(tmp_path):
    """A --force export killed between its two renames (the earlier export moved aside into
    .OUT.ftui-replaced-*, the new one not yet at OUT): the next sweep puts the earlier export
    back at OUT instead of removing it with the job's leftovers (nothing the user had is lost);
    once OUT holds an export again, a leftover aside is only swept."""
    from ftui.safety.export_out import ASIDE_KIND, aside_prefix, sweep_leftovers
    from ftui.safety.owned_dirs import make_temp_dir, release

    out = tmp_path / "model"
    aside, fd = make_temp_dir(tmp_path, aside_prefix(out), "", ASIDE_KIND, out=str(out))
    (aside / "old").mkdir()
    (aside / "old" / "model.safetensors").write_bytes(b"weights")
    release(fd)  # the job is gone (kill -9 releases its flock)
    line = sweep_leftovers(tmp_path)
    assert line is not None and str(out) in line
    assert (out / "model.safetensors").read_bytes() == b"weights" and not aside.exists()

    aside, fd = make_temp_dir(tmp_path, aside_prefix(out), "", ASIDE_KIND, out=str(out))
    (aside / "old").mkdir()
    release(fd)
    assert "removed 1" in sweep_leftovers(tmp_path) and not aside.exists()
    assert (out / "model.safetensors").read_bytes() == b"weights"


def test_runs_with_a_too_deep_launch_record_events_line_or_trainer_state_are_listed_not_a_traceback(tmp_path, capsys):
    """Run files nested deeper than json.loads follows: `ftui runs` lists the runs (a launch
    record it cannot read is said as such, an events line that is not an event is skipped) and
    a checkpoint whose trainer_state.json is one is named unreadable (resume skips it)."""
    from ftui.cli.main import main
    from ftui.rundir.checkpoints import checkpoint_damage
    from ftui.rundir.follower import summarize_run
    from tests.fixtures_runs import write_run

    root = tmp_path / "runs"
    deep_launch = write_run(root, "deep-launch", steps=3, max_steps=3, end="completed")
    (deep_launch / "launch.json").write_text(DEEP)
    deep_event = write_run(root, "deep-event", steps=3, max_steps=3, end="completed")
    with open(deep_event / "events.jsonl", "a") as fh:
        fh.write(DEEP + "\n")
    assert summarize_run(deep_event).status == "completed"
    assert main(["runs", "--root", str(root)]) == 0
    out = capsys.readouterr().out
    assert "deep-launch" in out and "deep-event" in out
    ckpt = deep_event / "checkpoints" / "step-2"
    ckpt.mkdir(parents=True)
    (ckpt / "trainer_state.json").write_text(DEEP)
    assert "unreadable" in checkpoint_damage(ckpt)


def test_a_temporary_directory_swept_before_its_marker_is_in_is_made_again(tmp_path, monkeypatch):
    """A sweep (`ftui runs`, another export) that runs between mkdtemp and the marker takes
    the new, empty directory for a leftover and removes it; the export then makes another
    instead of failing to start."""
    from ftui.safety import owned_dirs
    from ftui.safety.export_out import sweep_leftovers

    real_claim = owned_dirs.claim
    calls = []

    def swept_first(directory, kind, **info):
        calls.append(directory)
        if len(calls) == 1:
            sweep_leftovers(directory.parent)  # the empty directory goes, as a concurrent sweep would remove it
            assert not directory.exists()
        return real_claim(directory, kind, **info)

    monkeypatch.setattr(owned_dirs, "claim", swept_first)
    path, fd = owned_dirs.make_temp_dir(tmp_path, ".m.ftui-export-", "", "export")
    try:
        assert path.is_dir() and (path / owned_dirs.MARKER).is_file() and len(calls) == 2
    finally:
        owned_dirs.release(fd)
