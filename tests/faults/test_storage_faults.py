"""Faults of the storage under a run: a full disk while writing a checkpoint (simulated with
a file-size limit, RLIMIT_FSIZE, on the training processes), a disk that fills up while
events are written or is nearly full at the start (a small tmpfs), and a damaged newest
checkpoint."""

import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import tiny_config, train_sync, wait_for
from ftui.rundir.event_reader import read_all
from ftui.rundir.paths import EVENTS_FILE, RESERVE_FILE
from ftui.jobs.launch import launch_command, prepare_run
from ftui.jobs.torch_env import torch_process_env
from ftui.rundir.checkpoints import checkpoint_damage, checkpoints, resolve_checkpoint
from ftui.rundir.follower import summarize_run

FTUI = [sys.executable, "-m", "ftui.cli.main"]


@pytest.fixture(scope="module")
def four_step_run(tmp_path_factory) -> Path:
    """A finished 4-step full fine-tuning run with checkpoints at steps 2 and 4, trained once
    for the tests below, which each damage a copy (CI time: a run's start-up is most of its cost)."""
    run, _events, proc = train_sync(tiny_config(tmp_path_factory.mktemp("four-steps"), finetuning_type="full", max_steps=4, save_steps=2))
    assert proc.returncode == 0, proc.stderr[-2000:]
    return run


def copy_of(run: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(run, tmp_path / run.name))


def test_disk_full_during_a_checkpoint_fails_clearly_and_keeps_the_earlier_ones(four_step_run, tmp_path):
    run = copy_of(four_step_run, tmp_path)
    before = {p.name: sorted((f.name, f.stat().st_size) for f in p.rglob("*")) for _, p in checkpoints(run)}
    assert set(before) == {"step-2", "step-4"}
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    cfg["max_steps"] = 8
    (run / "config.yaml").write_text(yaml.safe_dump(cfg))

    def limit_file_size():  # each checkpoint file of this model is ~10 MB; events stay far below 1 MB
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))

    from ftui.config.load import load_config

    rc, _ = load_config(run / "config.yaml")
    cmd = launch_command(rc, run, sys.executable, resume=checkpoints(run)[-1][1])
    env = torch_process_env()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, preexec_fn=limit_file_size)
    assert proc.returncode != 0
    end = read_all(run / EVENTS_FILE)[-1]
    assert end["event"] == "run_end" and end["status"] == "failed", end
    assert "disk is full" in end["hint"] and "intact" in end["hint"]
    assert summarize_run(run).status == "failed"
    after = {p.name: sorted((f.name, f.stat().st_size) for f in p.rglob("*")) for _, p in checkpoints(run)}
    assert after == before  # the failed step-6 is not listed; step-2 and step-4 are untouched
    assert resolve_checkpoint(run, None).name == "step-4" and checkpoint_damage(run / "checkpoints" / "step-4") is None


def test_the_disk_full_hint_offers_a_resume_only_where_a_checkpoint_is(tmp_path):
    """A run that had saved no checkpoint yet (save_strategy no, or fewer steps than save_steps)
    cannot resume: it is told to start again with its config; an eval or predict job, to run
    again; a run with checkpoints, that they are intact and to resume."""
    import errno

    from ftui.runner.faults import disk_full_hint, hint_for

    full = OSError(errno.ENOSPC, "No space left on device")
    cfg = tiny_config(tmp_path, save_strategy="no")
    run = tmp_path / "run-1"
    run.mkdir()
    fresh = hint_for(full, cfg, "train", run)
    assert "saved no checkpoint to resume from (save_strategy no, save_steps" in fresh and "--resume" not in fresh
    assert f"ftui train {run / 'config.yaml'}" in fresh
    assert "cut short" in disk_full_hint(cfg, "train", run, events_cut=True)
    predict = hint_for(full, cfg, "predict", run)
    assert "run the job again" in predict and "ftui train" not in predict
    (run / "checkpoints" / "step-4").mkdir(parents=True)
    assert "intact" in hint_for(full, cfg, "train", run) and "--resume" in disk_full_hint(cfg, "train", run, events_cut=True)


def test_a_damaged_newest_checkpoint_is_noticed_and_the_previous_one_offered(four_step_run, tmp_path):
    run = copy_of(four_step_run, tmp_path)
    newest = run / "checkpoints" / "step-4"
    biggest = max((f for f in newest.rglob("*") if f.is_file() and f.name != "trainer_state.json"), key=lambda f: f.stat().st_size)
    with open(biggest, "r+b") as fh:  # a truncated copy
        fh.truncate(biggest.stat().st_size // 2)
    assert "bytes" in checkpoint_damage(newest)
    skipped = []
    assert resolve_checkpoint(run, None, skipped).name == "step-2"
    assert skipped and "step-4 is damaged" in skipped[0]
    explicit = subprocess.run([*FTUI, "train", "--resume", str(run), "--checkpoint", "4"], capture_output=True, text=True, timeout=60)
    assert explicit.returncode == 2
    assert "step-4 is damaged" in explicit.stderr and "--checkpoint 2" in explicit.stderr
    resumed = subprocess.run([*FTUI, "train", "--resume", str(run), "--set", "max_steps=5"], capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "step-4 is damaged" in resumed.stderr and "resuming from step-2" in resumed.stderr
    starts = [e for e in read_all(run / EVENTS_FILE) if e["event"] == "run_start"]
    assert starts[-1]["resumed_from_step"] == 2
    assert summarize_run(run).status == "completed"


def _self_caused(exc: BaseException) -> BaseException:
    exc.__cause__ = exc  # what `raise err from err` leaves behind
    return exc


def test_error_walks_end_on_a_self_causing_or_cyclic_chain():
    import errno

    from ftui.runner.faults import disk_full, exception_chain

    emfile = _self_caused(OSError(errno.EMFILE, "Too many open files"))
    assert list(exception_chain(emfile)) == [emfile]
    assert not disk_full(emfile)
    first, second = RuntimeError("checkpoint failed"), OSError(errno.ENOSPC, "No space left on device")
    first.__context__, second.__context__ = second, first
    assert list(exception_chain(first)) == [first, second]
    assert disk_full(first)
    assert not disk_full(_self_caused(RuntimeError("a -> a")))


def test_a_failed_checkpoint_save_raises_the_storage_error_without_making_it_its_own_cause(tmp_path):
    import errno

    import pytest

    from ftui.runner.checkpoint import save_checkpoint
    from ftui.runner.engines import DistInfo

    class FailingEngine:
        info = DistInfo()
        name = "single"

        def save_state(self, directory):
            raise OSError(errno.EMFILE, "Too many open files")

    with pytest.raises(OSError) as raised:
        save_checkpoint(FailingEngine(), tmp_path, 1, {})
    assert raised.value.errno == errno.EMFILE and raised.value.__cause__ is not raised.value


# --- A disk that fills up under a run (a real small filesystem: tmpfs, so root only)

@pytest.fixture
def small_disk(tmp_path):
    """A 48 MiB tmpfs (the demo model's random base, saved into the run, is ~10 MB)."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    if os.geteuid() != 0:
        pytest.skip("fills a real 48 MiB disk: needs root to mount a tmpfs, and this is not root")
    mount = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if mount.returncode:  # root in a container without the right to mount
        pytest.skip("fills a real 48 MiB disk: mounting a tmpfs failed ({why})".format(why=mount.stderr.strip()[:200]))
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def fill_disk(where: Path, leave: int = 0) -> None:
    """Writes a filler file until only ``leave`` bytes are free. A disk already full (the run's
    own writes got there first: seen once in CI, the filler's open failing with ENOSPC) is
    what it was to make."""
    import errno

    try:
        fh = open(where / "filler", "wb")
    except OSError as err:
        if err.errno != errno.ENOSPC:
            raise
        return
    with fh:
        try:
            while True:
                free = shutil.disk_usage(where).free - leave
                if free <= 0:
                    break
                fh.write(bytes(min(free, 1 << 20)))
                fh.flush()
        except OSError:
            pass


def supervise(cfg, run: Path) -> subprocess.Popen:
    """The supervisor + launcher as `ftui train --detach` starts them (train.log in the run directory)."""
    env = torch_process_env()
    cmd = [sys.executable, "-m", "ftui.jobs.supervise", str(run), "--", *launch_command(cfg, run, sys.executable)]
    with open(run / "train.log", "ab", buffering=0) as log:
        return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)


def test_disk_full_while_events_are_written_ends_the_run_saying_disk_full(small_disk):
    cfg = tiny_config(small_disk, max_steps=100000, save_steps=100000, max_samples=16)
    run = prepare_run(cfg).resolve()
    proc = supervise(cfg, run)
    try:
        assert wait_for(lambda: any(e["event"] == "step" for e in read_all(run / EVENTS_FILE)), timeout=300)
        fill_disk(small_disk)
        proc.wait(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    end = read_all(run / EVENTS_FILE)[-1]
    assert end["event"] == "run_end" and end["status"] == "failed", end
    assert "disk full" in end["reason"] and "disk is full" in end["hint"]
    assert "saved no checkpoint" in end["hint"] and "--resume" not in end["hint"]  # save_steps 100000: none to resume
    summary = summarize_run(run)
    assert summary.status == "failed" and "disk full" in summary.reason
    assert not (run / RESERVE_FILE).exists()


def test_a_disk_with_8_kib_free_at_start_says_disk_full(small_disk):
    cfg = tiny_config(small_disk, max_steps=2)
    run = prepare_run(cfg).resolve()
    fill_disk(small_disk, leave=8192)
    proc = supervise(cfg, run)
    assert proc.wait(timeout=300) != 0
    end = read_all(run / EVENTS_FILE)[-1]
    assert end["event"] == "run_end" and end["status"] == "failed", end
    assert "disk full" in end["reason"] and "train.log may be empty" in end["hint"]
