"""Faults of the storage under a run: a full disk while writing a checkpoint (simulated with
a file-size limit, RLIMIT_FSIZE, on the training processes), and a damaged newest checkpoint."""

import os
import resource
import subprocess
import sys

import yaml

from conftest import tiny_config, train_sync
from ftui.events import EVENTS_FILE, read_all
from ftui.runner.launch import launch_command
from ftui.runs import checkpoint_damage, checkpoints, resolve_checkpoint, summarize_run

FTUI = [sys.executable, "-m", "ftui.cli"]


def test_disk_full_during_a_checkpoint_fails_clearly_and_keeps_the_earlier_ones(tmp_path):
    run, _events, proc = train_sync(tiny_config(tmp_path, finetuning_type="full", max_steps=4, save_steps=2))
    assert proc.returncode == 0, proc.stderr[-2000:]
    before = {p.name: sorted((f.name, f.stat().st_size) for f in p.rglob("*")) for _, p in checkpoints(run)}
    assert set(before) == {"step-2", "step-4"}
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    cfg["max_steps"] = 8
    (run / "config.yaml").write_text(yaml.safe_dump(cfg))

    def limit_file_size():  # each checkpoint file of this model is ~10 MB; events stay far below 1 MB
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))

    from ftui.presets.config import load_config

    rc, _ = load_config(run / "config.yaml")
    cmd = launch_command(rc, run, sys.executable, resume=checkpoints(run)[-1][1])
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, preexec_fn=limit_file_size)
    assert proc.returncode != 0
    end = read_all(run / EVENTS_FILE)[-1]
    assert end["event"] == "run_end" and end["status"] == "failed", end
    assert "disk is full" in end["hint"] and "intact" in end["hint"]
    assert summarize_run(run).status == "failed"
    after = {p.name: sorted((f.name, f.stat().st_size) for f in p.rglob("*")) for _, p in checkpoints(run)}
    assert after == before  # the failed step-6 is not listed; step-2 and step-4 are untouched
    assert resolve_checkpoint(run, None).name == "step-4" and checkpoint_damage(run / "checkpoints" / "step-4") is None


def test_a_damaged_newest_checkpoint_is_noticed_and_the_previous_one_offered(tmp_path):
    run, _events, proc = train_sync(tiny_config(tmp_path, finetuning_type="full", max_steps=4, save_steps=2))
    assert proc.returncode == 0
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

    from ftui.runner.train import disk_full, exception_chain

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
