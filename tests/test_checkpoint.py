"""Checkpoints are complete or absent; a save that dies half-way never replaces the last one."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from conftest import tiny_config
from ftui.rundir.checkpoints import CheckpointError, checkpoints, resolve_checkpoint


@pytest.fixture()
def engine(tmp_path):
    import torch

    from ftui.runner.engines import DistInfo, make_engine
    from ftui.runner.model import apply_method, load_model

    cfg = tiny_config(tmp_path)
    model = apply_method(load_model(cfg, torch.device("cpu")), cfg)
    eng = make_engine(cfg, DistInfo(), torch.device("cpu"))
    eng.prepare(model)
    return eng


def _state(step):
    return {"scheduler": {}, "scaler": None, "total_tokens": 0.0, "micro_batch_size": 4, "accumulation": 1, "max_steps": 10, "step": step}


def test_interrupted_save_keeps_the_previous_checkpoint(engine, tmp_path, monkeypatch):
    from ftui.runner import checkpoint as ck

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    good = ck.save_checkpoint(engine, run_dir, 2, _state(2))
    before = sorted(p.relative_to(good) for p in good.rglob("*"))

    real = engine.save_state

    def dies_half_way(directory: Path) -> None:
        real(directory)  # the state is written ...
        raise OSError(28, "No space left on device")  # ... and then the save dies

    monkeypatch.setattr(engine, "save_state", dies_half_way)
    with pytest.raises(OSError):
        ck.save_checkpoint(engine, run_dir, 4, _state(4))
    assert [s for s, _ in checkpoints(run_dir)] == [2]
    assert sorted(p.relative_to(good) for p in good.rglob("*")) == before
    assert resolve_checkpoint(run_dir, None) == good
    assert (run_dir / "checkpoints" / ".step-4.tmp").exists()  # the leftover is ignored ...

    monkeypatch.setattr(engine, "save_state", real)
    ck.save_checkpoint(engine, run_dir, 6, _state(6))
    assert [s for s, _ in checkpoints(run_dir)] == [2, 6]
    assert not (run_dir / "checkpoints" / ".step-4.tmp").exists()  # ... and removed by the next save


def test_save_total_limit_keeps_the_newest(engine, tmp_path):
    from ftui.runner import checkpoint as ck

    for step in (1, 2, 3):
        ck.save_checkpoint(engine, tmp_path, step, _state(step), save_total_limit=2)
    assert [s for s, _ in checkpoints(tmp_path)] == [2, 3]


def test_load_restores_weights_and_optimizer(engine, tmp_path):
    import torch

    from ftui.runner import checkpoint as ck

    p = next(engine.module.parameters())
    p.grad = torch.ones_like(p)
    engine.optimizer.step()
    saved = p.detach().clone()
    moment = engine.optimizer.state[p]["exp_avg"].clone()
    ck.save_checkpoint(engine, tmp_path, 1, _state(1))
    with torch.no_grad():
        p.add_(1.0)
    engine.optimizer.state[p]["exp_avg"].zero_()
    state = ck.load_checkpoint(engine, tmp_path / "checkpoints" / "step-1")
    assert state["step"] == 1
    assert torch.equal(p.detach(), saved)
    assert torch.equal(engine.optimizer.state[p]["exp_avg"], moment)


def test_resolve_checkpoint_messages(tmp_path):
    with pytest.raises(CheckpointError, match="no complete checkpoint"):
        resolve_checkpoint(tmp_path, None)
    (tmp_path / "checkpoints" / "step-3").mkdir(parents=True)
    (tmp_path / "checkpoints" / "step-3" / "trainer_state.json").write_text("{}")  # written last, before the rename
    (tmp_path / "checkpoints" / ".step-5.tmp").mkdir()
    assert resolve_checkpoint(tmp_path, "3").name == "step-3"
    with pytest.raises(CheckpointError, match=r"no checkpoint at step 5 \(complete checkpoints: 3\)"):
        resolve_checkpoint(tmp_path, "5")
    with pytest.raises(CheckpointError, match="not a complete ftui checkpoint"):
        resolve_checkpoint(tmp_path, str(tmp_path / "checkpoints" / ".step-5.tmp"))


@pytest.mark.dist
@pytest.mark.slow  # CI time: test_interrupted_save_keeps_the_previous_checkpoint (in one process) and faults/test_process_faults.py's kill -9 at a random point
def test_kill_during_checkpoint_write_leaves_the_previous_one(tmp_path):
    """kill -9 of the whole job while it writes step-N: step-(N-k) stays and resumes."""
    from ftui.jobs.launch import prepare_run, start_run, stop_run

    cfg = tiny_config(tmp_path, engine="ddp", nproc_per_node=2, max_steps=100000, save_steps=2, logging_steps=1)
    run_dir = prepare_run(cfg)
    start_run(run_dir, cfg)
    ck = run_dir / "checkpoints"
    deadline = time.time() + 120
    while time.time() < deadline:  # wait until a later save is in flight
        if ck.exists() and any(p.name.startswith(".step-") for p in ck.iterdir()) and checkpoints(run_dir):
            break
        time.sleep(0.005)
    stop_run(run_dir, force=True)
    time.sleep(1.0)
    done = checkpoints(run_dir)
    assert done, "no complete checkpoint was written before the kill"
    newest = resolve_checkpoint(run_dir, None)
    assert json.loads((newest / "trainer_state.json").read_text())["step"] == done[-1][0]
