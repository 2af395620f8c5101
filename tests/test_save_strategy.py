"""save_strategy (LLaMA-Factory's key): when checkpoints are written. steps: every save_steps and
at the end; epoch: at each epoch's end and at the end; no: none while training. A stop saves
whatever the strategy."""

from __future__ import annotations

import pytest
import yaml

from conftest import tiny_config, train_sync
from ftui.rundir.checkpoints import checkpoints
from ftui.config.load import parse_config
from ftui.config.preflight import validate_config

DEMO = {"model_name_or_path": "ftui-demo", "model_init": "random", "dataset": "ftui_demo", "cutoff_len": 128}


@pytest.mark.parametrize("strategy,stopping,due", [
    ("steps", False, [3, 6, 7]),
    ("epoch", False, [4, 7]),  # 4 steps an epoch, 7 steps in all
    ("no", False, []),
    ("no", True, list(range(1, 8))),  # a stop saves, whatever the strategy
])
def test_which_steps_write_a_checkpoint(strategy, stopping, due):
    from ftui.runner.loop import checkpoint_due

    assert [s for s in range(1, 8) if checkpoint_due(strategy, 3, 4, s, 7, stopping)] == due


def test_the_key_is_read_as_llamafactory_writes_it_and_an_unknown_strategy_is_refused_by_name():
    assert parse_config(DEMO | {"save_strategy": "epoch"})[0].save_strategy == "epoch"
    cfg, warnings = parse_config(DEMO | yaml.safe_load("save_strategy: no"))  # unquoted: YAML's false
    assert (cfg.save_strategy, warnings) == ("no", [])
    assert parse_config(DEMO)[0].save_strategy == "steps"
    _cfg, problems = validate_config(DEMO | {"save_strategy": "best"})
    assert [p.field for p in problems] == ["save_strategy"] and "'epoch'" in problems[0].message


def test_epoch_strategy_saves_at_each_epochs_end_and_at_the_end(tmp_path):
    cfg = tiny_config(tmp_path, finetuning_type="lora", save_strategy="epoch", save_steps=1, max_steps=5,
                      max_samples=12, per_device_train_batch_size=4, val_size=0.0)
    run_dir, events, proc = train_sync(cfg)
    assert proc.returncode == 0, proc.stderr[-2000:]
    start = next(e for e in events if e["event"] == "run_start")
    per_epoch = start["steps_per_epoch"]
    assert per_epoch == 3  # 12 examples, micro batch 4
    assert [s for s, _path in checkpoints(run_dir)] == [3, 5]  # not every step (save_steps: 1 is not used)
    assert [e["step"] for e in events if e["event"] == "checkpoint"] == [3, 5]
    assert (run_dir / "final").is_dir()
