"""Issue 39, findings 8 (delete's half) and 9: ``ftui delete`` of a run that is a symbolic link
removes the link only (never what it points to), the question says exactly that, the app's
runs screen goes through the same function; a delete killed midway leaves a marked
``.RUN.*.deleting`` that the next delete and ``ftui runs`` finish, and a live one is left alone."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from ftui.rundir.delete import delete_run
from ftui.rundir.index import indexed_run_dirs, record_run
from tests.fixtures_runs import write_run


def linked_run(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A run directory elsewhere, with the user's files beside it and in it, and a link to it
    in the runs root (as a user moving runs to a larger disk makes)."""
    root = tmp_path / "runs"
    disk = tmp_path / "bigdisk"
    target = write_run(disk, "moved-1", steps=3, max_steps=3, end="completed")
    (target / "my-notes.txt").write_text("mine")
    (disk / "other-project.txt").write_text("mine too")
    root.mkdir()
    link = root / "moved-1"
    link.symlink_to(target)
    return root, link, target


def files(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


def test_deleting_a_run_that_is_a_link_removes_the_link_only(tmp_path):
    """Finding 9: delete followed the link and deleted the target, leaving a dangling link."""
    root, link, target = linked_run(tmp_path)
    record_run(target)
    before = files(tmp_path / "bigdisk")
    done = delete_run(link)
    assert not os.path.lexists(link) and done.kept == target and done.path == link
    assert files(tmp_path / "bigdisk") == before  # the run it pointed to, and everything beside it, kept
    assert str(target) in done.message() and target not in indexed_run_dirs()


def test_cli_question_says_exactly_what_goes(tmp_path, monkeypatch, capsys):
    from ftui.cli import main as cli

    root, link, target = linked_run(tmp_path)
    asked: list[str] = []
    monkeypatch.setattr(sys.stdin, "isatty", lambda: True, raising=False)
    monkeypatch.setattr("builtins.input", lambda prompt: asked.append(prompt) or "y")
    assert cli.main(["delete", "moved-1", "--root", str(root)]) == 0
    assert f"Remove the link {link} (to {target})" in asked[0] and "is kept" in asked[0]
    assert "kept" in capsys.readouterr().out and target.is_dir() and not os.path.lexists(link)
    plain = write_run(root, "plain-1", steps=3, max_steps=3, end="completed")
    assert cli.main(["delete", "plain-1", "--root", str(root)]) == 0
    assert f"{plain}?" in asked[1] and "checkpoints and final/" in asked[1] and not plain.exists()


async def test_runs_screen_deletes_the_link_not_its_target(tmp_path):
    from ftui.tui.screens.modals import Confirm
    from tests.test_tui_pilot import make_app, until
    from tests.test_tui_pilot import open_runs

    root, link, target = linked_run(tmp_path)
    before = files(target)
    app = make_app(tmp_path)
    async with app.run_test(size=(120, 30)) as pilot:
        await open_runs(pilot, app, 1)
        screen = app.screen
        await pilot.press("d")
        await until(pilot, lambda: isinstance(app.screen, Confirm))
        assert "Remove the link" in app.screen.question and str(target) in app.screen.question
        await pilot.press("enter")
        await until(pilot, lambda: not os.path.lexists(link))
        await until(pilot, lambda: screen.runs == [])
        assert any("is kept" in n.message for n in app._notifications)
    assert files(target) == before


KILLED_DELETE = """
import os, shutil, signal, sys
from pathlib import Path
from ftui.rundir.delete import delete_run
def killed(path, *args, **kwargs):
    p = Path(path)
    print(next(q for q in (p, *p.parents) if q.name.endswith(".deleting")), flush=True)
    if sys.argv[2] == "kill":
        os.kill(os.getpid(), signal.SIGKILL)  # killed midway, with the checkpoints still there
    sys.stdin.read()  # a delete still at work
shutil.rmtree = killed
delete_run(sys.argv[1])
"""


def leave_deleting(run: Path, how: str) -> tuple[Path, subprocess.Popen]:
    """delete_run itself in another process, stopped where it removes the renamed directory's
    checkpoints: killed with SIGKILL (``kill``) or still at work (``live``)."""
    proc = subprocess.Popen([sys.executable, "-c", KILLED_DELETE, str(run), how], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    hidden = Path(proc.stdout.readline().strip())
    if how == "kill":
        assert proc.wait(timeout=60) == -signal.SIGKILL
    return hidden, proc


def test_a_killed_deletes_leftover_is_finished_by_ftui_runs_and_the_next_delete(tmp_path, capsys):
    """Finding 8: a delete killed midway left .RUN-….deleting/ forever. `ftui runs` and the next
    delete in the same runs root remove it and say so; a delete still at work is left alone,
    and so is a look-alike directory the user made."""
    from ftui.cli.main import main

    root = tmp_path / "runs"
    for name in ("a-1", "b-1", "c-1"):
        run = write_run(root, name, steps=3, max_steps=3, end="completed")
        (run / "checkpoints" / "step-3").mkdir(parents=True)
        (run / "checkpoints" / "step-3" / "model.safetensors").write_bytes(b"x" * 4096)
    keep = write_run(root, "kept-1", steps=3, max_steps=3, end="completed")
    dead_a, _ = leave_deleting(root / "a-1", "kill")
    live, proc = leave_deleting(root / "c-1", "live")
    lookalike = root / ".mine.deleting"
    lookalike.mkdir()
    (lookalike / "notes.txt").write_text("mine")
    try:
        assert dead_a.is_dir() and dead_a.name.startswith(".a-1.") and dead_a.name.endswith(".deleting")
        assert main(["runs", "--root", str(root)]) == 0
        out = capsys.readouterr()
        assert str(dead_a) in out.err.replace("\n", "") and "removed 1" in out.err and not dead_a.exists()
        assert live.is_dir() and (lookalike / "notes.txt").is_file()

        dead_b, _ = leave_deleting(root / "b-1", "kill")
        done = delete_run(keep)
        assert done.leftovers is not None and str(dead_b) in done.leftovers and not dead_b.exists()
        assert live.is_dir() and (lookalike / "notes.txt").is_file()
    finally:
        proc.stdin.close()
        proc.wait(timeout=60)
    assert main(["runs", "--root", str(root)]) == 0
    assert not live.exists() and sorted(p.name for p in root.iterdir()) == [".mine.deleting"]


@pytest.mark.parametrize("swap", ["link-became-directory", "directory-became-link"])
def test_a_run_that_changed_after_the_question_is_not_deleted(tmp_path, swap):
    """Delete removes what its question showed: the user agreed to remove a link (its target
    kept), and a directory is there now, or agreed to delete a directory that is now a link to
    another run: refused, nothing deleted."""
    from ftui.rundir.delete import delete_plan, RunDeleteError

    root, link, target = linked_run(tmp_path)
    if swap == "link-became-directory":
        plan = delete_plan(link)
        os.unlink(link)
        write_run(root, link.name, steps=3, max_steps=3, end="completed")
        kept = link
    else:
        plan = delete_plan(target)
        os.unlink(link)
        os.rename(target, link)  # the run moved beside; its old name is now a link to it
        os.symlink(link, target)
        kept = link
    with pytest.raises(RunDeleteError, match="changed since the question"):
        delete_run(plan.run, asked=plan)
    assert (kept / "config.yaml").is_file() and os.path.lexists(plan.run)
