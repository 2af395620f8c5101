"""Issue 39, findings 2, 4 (export's half) and 8 (export's half): ``ftui export --force`` never
deletes what ftui did not write, never follows a symbolic link to delete, writes into an
unpredictable temporary directory, and what a killed export leaves is found and removed.

The jobs run in this process (``ftui.runner.export.export``) on the session's demo run (no
training of their own); the CLI is driven through ``ftui.cli.main.main``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_export import demo_copy  # noqa: F401 (the module's fixture: a copy of the session's demo run)


def user_folder(path: Path) -> Path:
    """What finding 2 lost: a git clone with its virtual environment and the user's files."""
    (path / ".git" / "objects").mkdir(parents=True)
    (path / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (path / ".venv" / "bin").mkdir(parents=True)
    (path / ".venv" / "bin" / "python").write_text("#!/bin/sh\n")
    (path / "src").mkdir()
    (path / "src" / "main.py").write_text("print('mine')\n")
    (path / "README.md").write_text("my project\n")
    return path


def tree(path: Path) -> dict[str, str]:
    return {str(p.relative_to(path)): (p.read_text() if p.is_file() else "/") for p in sorted(path.rglob("*"))}


def run_export(job_dir: Path):
    from ftui.config.load import load_config
    from ftui.runner.engines import DistInfo
    from ftui.runner.export import export
    from ftui.runner.faults import StopRequest

    cfg, _ = load_config(job_dir / "config.yaml")
    return export(job_dir, cfg, DistInfo.from_env(), None, StopRequest(), None)


def test_force_refuses_a_folder_ftui_did_not_write_and_a_link_to_one(demo_copy, tmp_path, capsys):  # noqa: F811
    """Finding 2: --force over a git clone deleted it. Now refused (exit 2), naming what is
    there; a symbolic link to it is refused too; nothing is deleted, no job is made."""
    from ftui.cli.main import main

    clone = user_folder(tmp_path / "project")
    before = tree(clone)
    link = tmp_path / "link-to-project"
    link.symlink_to(clone)
    assert main(["export", str(demo_copy), "--out", str(clone), "--force"]) == 2
    said = capsys.readouterr().err.replace("\n", " ")
    assert ".git" in said and ".venv" in said and "did not write" in said
    assert main(["export", str(demo_copy), "--out", str(link), "--force"]) == 2
    assert "symbolic link" in capsys.readouterr().err.replace("\n", " ")
    assert tree(clone) == before and link.is_symlink()
    assert not (demo_copy / "export").exists() or not any((demo_copy / "export").iterdir())


def test_the_job_checks_again_before_it_replaces(demo_copy, tmp_path):  # noqa: F811
    """Between the CLI's check and the job's end (minutes), the out dir may become the user's
    folder or a link to one: the job refuses then too, and deletes nothing."""
    from ftui.jobs.export import prepare_export
    from ftui.runner.export import ExportDirError

    for kind in ("folder", "link"):
        out = tmp_path / f"out-{kind}"
        job_dir, _cfg, _needs = prepare_export(demo_copy, which=None, out=out, dtype="fp32", force=True)
        clone = user_folder(tmp_path / f"project-{kind}")
        before = tree(clone)
        if kind == "folder":
            clone.rename(out)
            clone = out
        else:
            out.symlink_to(clone)
        with pytest.raises(ExportDirError, match="did not write" if kind == "folder" else "symbolic link"):
            run_export(job_dir)
        assert tree(clone) == before
        assert not [p.name for p in tmp_path.iterdir() if ".ftui-" in p.name]  # no temporary directory left


def test_force_replaces_an_earlier_ftui_export_once_the_new_one_is_complete(demo_copy, tmp_path):  # noqa: F811
    from ftui.jobs.export import out_dir_problem, prepare_export
    from ftui.safety.export_out import EXPORT_MARKER

    out = tmp_path / "model"
    job1, _, _ = prepare_export(demo_copy, which=None, out=out, dtype="fp32")
    assert run_export(job1)[0] == "completed"
    marker = json.loads((out / EXPORT_MARKER).read_text())
    assert "model.safetensors" in marker["files"] and EXPORT_MARKER not in marker["files"]
    assert oct(out.stat().st_mode & 0o777) == oct(0o777 & ~current_umask())  # not the temporary directory's 0700
    assert out_dir_problem(out, force=True) is None
    job2, _, _ = prepare_export(demo_copy, which=None, out=out, dtype="bf16", force=True)
    assert run_export(job2)[0] == "completed"
    assert json.loads((out / "ftui_export.json").read_text())["dtype"] == "bf16"  # the new one
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]  # the old one gone, nothing aside left
    (out / "notes.txt").write_text("mine")  # the user's file in it: no longer only ftui's
    assert "notes.txt" in out_dir_problem(out, force=True)
    (out / "notes.txt").unlink()
    with open(out / "Modelfile", "a") as fh:
        fh.write("PARAMETER temperature 0.2\n")  # the user's edit of a file the export wrote
    assert "Modelfile" in out_dir_problem(out, force=True)


def current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_the_temporary_directory_is_unpredictable_and_a_planted_name_is_harmless(demo_copy, tmp_path, monkeypatch):  # noqa: F811
    """Finding 4: the temporary name was .OUT.ftui-export-JOBID, which another user could plant
    (as a directory, blocking the export with a hint that blamed the weights, or as a link).
    Now mkdtemp's: the planted names stay as they were and the export completes."""
    import ftui.runner.export as runner_export
    from ftui.jobs.export import prepare_export

    out = tmp_path / "model"
    job_dir, _, _ = prepare_export(demo_copy, which=None, out=out, dtype="fp32")
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "precious.txt").write_text("keep")
    planted = tmp_path / f".model.ftui-export-{job_dir.name}"
    planted.symlink_to(victim)
    seen: list[tuple[Path, int]] = []
    real = runner_export.write_export

    def spy(spec, cfg, dest, emit, stop):
        seen.append((dest, dest.stat().st_mode & 0o777))
        return real(spec, cfg, dest, emit, stop)

    monkeypatch.setattr(runner_export, "write_export", spy)
    assert run_export(job_dir)[0] == "completed"
    assert (out / "model.safetensors").is_file()
    (dest, mode), = seen
    assert dest.parent == tmp_path and dest != planted and mode == 0o700
    assert planted.is_symlink() and (victim / "precious.txt").read_text() == "keep" and sorted(p.name for p in victim.iterdir()) == ["precious.txt"]


def test_a_temporary_directory_that_cannot_be_made_is_said_so(demo_copy, tmp_path, monkeypatch):  # noqa: F811
    import ftui.safety.owned_dirs
    from ftui.config.load import load_config
    from ftui.jobs.export import prepare_export
    from ftui.runner.export import ExportDirError
    from ftui.runner.faults import hint_for

    job_dir, _, _ = prepare_export(demo_copy, which=None, out=tmp_path / "model", dtype="fp32")

    def refused(*_a, **_k):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(ftui.safety.owned_dirs.tempfile, "mkdtemp", refused)
    with pytest.raises(ExportDirError, match="cannot create the export's temporary directory") as err:
        run_export(job_dir)
    cfg, _ = load_config(job_dir / "config.yaml")
    assert "weights" not in hint_for(err.value, cfg, "export", job_dir)


def test_a_failure_names_the_temporary_directory_it_leaves(demo_copy, tmp_path, monkeypatch):  # noqa: F811
    import ftui.safety.owned_dirs
    import ftui.runner.export as runner_export
    from ftui.jobs.export import prepare_export

    job_dir, _, _ = prepare_export(demo_copy, which=None, out=tmp_path / "model", dtype="fp32")

    def broken(spec, cfg, dest, emit, stop):
        (dest / "model-00001.safetensors").write_bytes(b"x" * 100)
        raise RuntimeError("the disk went away")

    monkeypatch.setattr(runner_export, "write_export", broken)
    monkeypatch.setattr(ftui.safety.owned_dirs, "remove", lambda path, fd=None: [f"{path}: Permission denied"])
    with pytest.raises(runner_export.ExportDirError) as err:
        run_export(job_dir)
    left = next(p for p in tmp_path.iterdir() if p.name.startswith(".model.ftui-export-"))
    assert str(left) in str(err.value) and "the disk went away" in str(err.value)


KILLED_EXPORT = """
import os, signal, sys
from pathlib import Path
from ftui.safety.export_out import TEMP_KIND, temp_prefix
from ftui.safety.owned_dirs import make_temp_dir
out = Path(sys.argv[1])
tmp, _lock = make_temp_dir(out.parent, temp_prefix(out), "", TEMP_KIND, job=sys.argv[2], out=str(out))
with open(tmp / "model-00001-of-00002.safetensors", "wb") as fh:
    fh.truncate(1 << 20)  # the sparse file a killed save leaves
print(tmp, flush=True)
if sys.argv[3] == "kill":
    os.kill(os.getpid(), signal.SIGKILL)  # what the OOM killer does
sys.stdin.read()  # a live job: holds the marker's lock until its stdin closes
"""


def leave_export_temp(out: Path, how: str, job: str = "job") -> tuple[Path, subprocess.Popen]:
    """An export's temporary directory made by the runner's own code in another process, which
    is then killed with SIGKILL (``kill``) or keeps working (``live``)."""
    proc = subprocess.Popen([sys.executable, "-c", KILLED_EXPORT, str(out), job, how], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    tmp = Path(proc.stdout.readline().strip())
    if how == "kill":
        assert proc.wait(timeout=60) == -signal.SIGKILL
    return tmp, proc


def test_a_killed_exports_leftover_is_removed_by_the_next_export_and_a_live_ones_is_kept(tmp_path):
    """Finding 8: kill -9 left .OUT.ftui-export-ID forever. The next export into the same
    parent removes it and says so; a live job's directory, a look-alike the user made and a
    marker that is not ftui's are left alone."""
    from ftui.jobs.export import sweep_out_parent
    from ftui.safety.owned_dirs import MARKER

    out = tmp_path / "exports" / "model"
    out.parent.mkdir()
    dead, _ = leave_export_temp(out, "kill")
    live, proc = leave_export_temp(out, "live")
    lookalike = out.parent / ".model.ftui-export-mine"
    lookalike.mkdir()
    (lookalike / "notes.txt").write_text("mine")
    forged = out.parent / ".model.ftui-export-forged"
    forged.mkdir()
    (forged / MARKER).write_text(json.dumps({"something": "else"}))
    try:
        assert dead.is_dir() and (dead / MARKER).is_file()
        line = sweep_out_parent(out)
        assert line is not None and str(dead) in line and "removed 1" in line
        assert not dead.exists() and live.is_dir() and (lookalike / "notes.txt").is_file() and forged.is_dir()
        assert sweep_out_parent(out) is None  # nothing more of ftui's that is dead
    finally:
        proc.stdin.close()
        proc.wait(timeout=60)
    assert str(live) in sweep_out_parent(out) and not live.exists()  # its job ended: now it goes


def test_ftui_runs_and_the_failed_export_name_or_remove_the_leftover(tmp_path, capsys):
    """`ftui runs` removes what killed exports left in FTUI_HOME/exports (and beside the runs'
    export out dirs), in one line on stderr; after a failed job, ftui export names its
    temporary directory while its job lives, and removes it once the job is gone."""
    from ftui.cli.main import main
    from ftui.rundir.events import make_event
    from ftui.jobs.export import leftover_note
    from ftui.rundir.paths import ftui_home
    from tests.fixtures_runs import write_run

    root = tmp_path / "runs"
    write_run(root, "done-1", steps=3, max_steps=3, end="completed")
    (ftui_home() / "exports").mkdir()
    dead, _ = leave_export_temp(ftui_home() / "exports" / "done-1-final", "kill")
    assert main(["runs", "--root", str(root)]) == 0
    captured = capsys.readouterr()
    assert str(dead) in captured.err.replace("\n", "") and str(dead) not in captured.out and not dead.exists()

    job_dir = tmp_path / "job"
    job_dir.mkdir()
    (tmp_path / "elsewhere").mkdir()
    live, proc = leave_export_temp(tmp_path / "elsewhere" / "m", "live")
    (job_dir / "events.jsonl").write_text(json.dumps(make_event("log", level="info", message="writing", temp_dir=str(live))) + "\n")
    try:
        note = leftover_note(job_dir)
        assert note is not None and str(live) in note and "is left" in note and live.is_dir()
    finally:
        proc.stdin.close()
        proc.wait(timeout=60)
    note = leftover_note(job_dir)
    assert note is not None and "removed" in note and not live.exists()
    assert leftover_note(job_dir) is None
