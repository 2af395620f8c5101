"""Where runs live (issue 13, item 1): a per-user default runs root (FTUI_HOME, else
XDG_DATA_HOME/ftui, else ~/.local/share/ftui) and an index of runs a config's output_dir put
elsewhere, so every run a user started is listed and found from any directory."""

from __future__ import annotations

import shutil
import subprocess
import sys

from conftest import tiny_config
from ftui.cli import main as cli
from ftui.rundir.paths import default_runs_root
from ftui.jobs.launch import prepare_run
from ftui.rundir.paths import ftui_home
from ftui.rundir.index import run_index_path
from ftui.rundir.listing import list_runs
from ftui.rundir.resolve import resolve_run

FTUI = [sys.executable, "-m", "ftui.cli.main"]


def test_the_default_runs_root_is_per_user_not_per_directory(tmp_path, monkeypatch):
    monkeypatch.delenv("FTUI_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    monkeypatch.chdir(tmp_path)
    assert default_runs_root() == str(tmp_path / "home" / ".local" / "share" / "ftui" / "runs")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    assert default_runs_root() == str(tmp_path / "data" / "ftui" / "runs")
    monkeypatch.setenv("FTUI_HOME", str(tmp_path / "mine"))
    assert default_runs_root() == str(tmp_path / "mine" / "runs")


def test_a_run_placed_elsewhere_by_output_dir_is_listed_and_resolved_from_any_directory(tmp_path, monkeypatch, capsys):
    saves = tmp_path / "project" / "saves" / "llama-lora"  # LLaMA-Factory's output_dir: saves/...
    run = prepare_run(tiny_config(tmp_path, output_dir=str(saves), run_name="elsewhere"))
    home_run = prepare_run(tiny_config(tmp_path, output_dir=default_runs_root(), run_name="at-home"))
    elsewhere = tmp_path / "somewhere-else"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)

    listed = {r.path.resolve() for r in list_runs(default_runs_root())}
    assert listed == {run.resolve(), home_run.resolve()}
    assert resolve_run(run.name, default_runs_root()).resolve() == run.resolve()
    assert resolve_run("elsew", default_runs_root()).resolve() == run.resolve()  # a unique prefix
    assert cli.main(["runs"]) == 0
    assert run.name in capsys.readouterr().out
    proc = subprocess.run([*FTUI, "watch", "elsewhere", "--interval", "0.01"], cwd=elsewhere, capture_output=True, text=True, timeout=120)
    assert "no run" not in proc.stderr, proc.stderr
    # An explicit other root lists what is under it only.
    assert [r.path.resolve() for r in list_runs(saves)] == [run.resolve()]


def test_a_stale_or_odd_index_entry_is_skipped(tmp_path):
    kept = prepare_run(tiny_config(tmp_path, output_dir=str(tmp_path / "saves"), run_name="kept"))
    gone = prepare_run(tiny_config(tmp_path, output_dir=str(tmp_path / "saves"), run_name="gone"))
    shutil.rmtree(gone)  # its config.yaml, data fingerprint and all
    with open(run_index_path(), "a") as fh:
        fh.write("relative/path\n\x00junk\n" + str(tmp_path / "never-was") + "\n" + str(kept) + "\n")
    assert run_index_path().parent == ftui_home()
    runs = list_runs(default_runs_root())
    assert [r.path.resolve() for r in runs] == [kept.resolve()]  # listed once, the stale one skipped
    assert all(r.status != "unreadable" for r in runs)


def test_a_run_under_the_default_root_is_not_indexed(tmp_path):
    prepare_run(tiny_config(tmp_path, output_dir=default_runs_root()))
    assert not run_index_path().exists()


def test_a_bare_name_is_the_run_under_the_root_before_a_look_alike_directory_here(tmp_path, monkeypatch, capsys):
    """`ftui delete NAME --yes` in a directory holding a folder of the same name (with a
    config.yaml of its own) deletes the run NAME under the root, never the folder here; the
    folder is named by a path (./NAME), and a bare name falls back to it only when the root
    has no such run. An empty name is refused, not taken as the current directory."""
    import pytest

    root = tmp_path / "root"
    run = prepare_run(tiny_config(tmp_path, output_dir=str(root), run_name="twin"))
    here = tmp_path / "here"
    (here / run.name).mkdir(parents=True)
    (here / run.name / "config.yaml").write_text("mine: true\n")
    (here / "config.yaml").write_text("a project's own config\n")
    (here / "solo").mkdir()
    (here / "solo" / "config.yaml").write_text("x: 1\n")
    monkeypatch.chdir(here)
    assert resolve_run(run.name, root) == run
    assert resolve_run(f"./{run.name}", root).resolve() == here / run.name
    assert resolve_run("solo", root).resolve() == here / "solo"
    for ref in ("", "  ", "./missing"):
        with pytest.raises(LookupError):
            resolve_run(ref, root)
    (run / "launch.json").write_text("{}")
    assert cli.main(["delete", run.name, "--yes", "--root", str(root)]) == 0
    assert not run.exists() and (here / run.name / "config.yaml").read_text() == "mine: true\n"


def test_a_job_under_a_run_is_found_by_the_runs_id_from_any_directory(tmp_path, monkeypatch):
    """`ftui watch RUN_ID/predict/ID` as the README writes it, run from a directory that is not
    the runs root: RUN_ID is the run's id. A path that does not exist says so (it was called
    'not a run directory'); one that exists but is no run keeps that message."""
    import pytest

    root = tmp_path / "root"
    run = prepare_run(tiny_config(tmp_path, output_dir=str(root), run_name="base"))
    job = run / "predict" / "p1"
    job.mkdir(parents=True)
    (job / "config.yaml").write_text("x: 1\n")
    (tmp_path / "here").mkdir()
    monkeypatch.chdir(tmp_path / "here")
    assert resolve_run(f"{run.name}/predict/p1", root) == job
    assert resolve_run(f"{run.name[:-2]}/predict/p1", root) == job  # a unique prefix, as for the run
    with pytest.raises(LookupError, match="no such directory"):
        resolve_run(f"{run.name}/predict/p2", root)
    (tmp_path / "here" / "plain").mkdir()
    with pytest.raises(LookupError, match="not a run directory"):
        resolve_run("plain/", root)


def test_the_apps_root_reaches_the_command_and_config_stays_with_the_app(tmp_path, monkeypatch, capsys):
    """`ftui --root R delete RUN` deletes RUN under R (it once acted on the default root)."""
    root = tmp_path / "elsewhere"
    run = prepare_run(tiny_config(tmp_path, output_dir=str(root), run_name="far"))
    (run / "launch.json").write_text("{}")
    assert cli.main(["--root", str(root), "runs"]) == 0 and run.name in capsys.readouterr().out
    assert cli.main(["--root", str(root), "delete", run.name, "--yes"]) == 0 and not run.exists()
    assert cli.main(["--root", str(root), "presets"]) == 2 and "takes no runs root" in capsys.readouterr().err
    assert cli.main(["--config", "x.yaml", "runs"]) == 2 and "--config opens the launch form" in capsys.readouterr().err


def test_a_runs_root_that_is_not_there_is_an_error_not_no_runs(tmp_path, capsys):
    assert cli.main(["runs", "--root", str(tmp_path / "typo")]) == 2
    assert "does not exist" in " ".join(capsys.readouterr().err.split())
    (tmp_path / "file").write_text("")
    assert cli.main(["runs", "--root", str(tmp_path / "file")]) == 2
    assert "is not a directory" in " ".join(capsys.readouterr().err.split())
    (tmp_path / "empty").mkdir()
    assert cli.main(["runs", "--root", str(tmp_path / "empty")]) == 0 and "no runs" in capsys.readouterr().out


def test_a_prefix_of_several_runs_is_refused_naming_the_newest_first(tmp_path):
    import pytest

    for stamp in ("20260101-000000", "20260202-000000"):
        (tmp_path / f"demo-{stamp}").mkdir()
        (tmp_path / f"demo-{stamp}" / "config.yaml").write_text("x: 1\n")
    with pytest.raises(LookupError, match="matches 2 runs .*: demo-20260202-000000, demo-20260101-000000; give more of the name"):
        resolve_run("demo", tmp_path)
    assert resolve_run("demo-202602", tmp_path) == tmp_path / "demo-20260202-000000"
