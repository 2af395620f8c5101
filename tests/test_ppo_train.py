"""`stage: ppo` end to end: with an rm run's reward model (one ftui trains with LoRA in the test,
or one written by hand), a LoRA and a full-finetuning run (frozen reference copy) generate,
score, train the policy and its value head (whose loss falls), write their rollouts and save
the value head beside final/ under TRL's key names; a run resumed at a rollout-batch boundary
makes exactly the rollouts of the uninterrupted run (the KL coefficient and the running score
moments kept in the checkpoint), one resumed inside a batch makes it again and says so; two
ranks under ddp and fsdp."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from safetensors.torch import load_file

from conftest import resume_sync, steps_of, tiny_config, train_sync
from ftui.rundir.rollouts import read_rollouts
from ppo_runs import ppo_config

PREFERENCE_DATA = Path(__file__).parent / "data" / "llamafactory_preference" / "data"


def trained_rm_run(tmp_path: Path) -> Path:
    """An rm run ftui trains with LoRA on LLaMA-Factory's dpo_en_demo pairs (a few steps)."""
    cfg = tiny_config(tmp_path / "rm", stage="rm", finetuning_type="lora", dataset="dpo_en_demo",
                      dataset_dir=str(PREFERENCE_DATA), cutoff_len=64, max_samples=8, max_steps=2, learning_rate=1e-3)
    run_dir, _events, proc = train_sync(cfg)
    assert proc.returncode == 0, (run_dir / "train.log").read_text()[-3000:]
    assert (run_dir / "final" / "value_head.safetensors").is_file()
    return run_dir


def mean(values: list[float]) -> float:
    return sum(values) / len(values)


def test_a_lora_ppo_run_with_an_rm_runs_reward_model_trains_its_value_head(tmp_path):
    """The issue's "Done when": ppo runs end to end with an rm run's reward model (its final/ as
    ftui writes it) and the value loss falls."""
    cfg = ppo_config(tmp_path, finetuning_type="lora", max_steps=8, logging_steps=2)
    run_dir, events, proc = train_sync(cfg)
    assert proc.returncode == 0, (run_dir / "train.log").read_text()[-3000:]
    assert "reference model = the policy with its LoRA adapter off" in (run_dir / "train.log").read_text()
    windows = steps_of(events)  # the first step, then windows of 2 steps: a rollout batch (ppo_buffer_size 1 x ppo_epochs 2)
    assert [s["step"] for s in windows] == [1, 2, 4, 6, 8]
    for name in ("policy_loss", "value_loss", "clipfrac", "vf_clipfrac", "approx_kl"):
        assert all(isinstance(s[name], float) for s in windows), name
    batches = [s for s in windows if "reward" in s]  # a window that made a rollout batch (step 2 trained step 1's)
    assert [s["step"] for s in batches] == [1, 4, 6, 8]
    for name in ("reward", "reward_std", "kl", "kl_coef", "completion_length", "clipped_ratio"):
        assert all(isinstance(s[name], float) for s in batches), name
    assert batches[0]["kl"] == 0.0 and batches[0]["kl_coef"] == 0.2  # the policy starts as the reference
    assert batches[-1]["kl"] != 0.0 and batches[-1]["kl_coef"] < 0.2  # below ppo_target: the coefficient falls
    values = [s["value_loss"] for s in windows]
    assert values[-1] < 0.5 * values[0], values  # the fresh value head learns the returns
    rows = read_rollouts(run_dir)
    assert len(rows) == 4 * 4 and {r["step"] for r in rows} == {1, 3, 5, 7}
    assert all(set(r["rewards"]) == {"reward_model"} and r["reward"] == r["rewards"]["reward_model"] for r in rows)
    assert sum(r["reward"] for r in rows[:4]) / 4 == pytest.approx(batches[0]["reward"], abs=1e-4)
    final = run_dir / "final"
    assert (final / "adapter_model.safetensors").is_file()
    head = load_file(str(final / "value_head.safetensors"))
    assert sorted(head) == ["v_head.summary.bias", "v_head.summary.weight"]
    assert not any("v_head" in k for k in load_file(str(final / "adapter_model.safetensors")))


@pytest.mark.slow
def test_a_ppo_run_scores_with_a_lora_rm_run_ftui_trained(tmp_path):
    rm_run = trained_rm_run(tmp_path)
    cfg = ppo_config(tmp_path, finetuning_type="lora", reward_model=str(rm_run), reward_model_type="lora", max_steps=2)
    run_dir, events, proc = train_sync(cfg)
    assert proc.returncode == 0, (run_dir / "train.log").read_text()[-3000:]
    assert isinstance(steps_of(events)[0]["reward"], float)
    assert {r["step"] for r in read_rollouts(run_dir)} == {1}


@pytest.mark.slow
def test_a_full_ppo_run_keeps_a_frozen_reference_copy_and_saves_the_value_head(tmp_path):
    run_dir, events, proc = train_sync(ppo_config(tmp_path, finetuning_type="full", max_steps=4))
    assert proc.returncode == 0, (run_dir / "train.log").read_text()[-3000:]
    assert "reference model = a frozen copy" in (run_dir / "train.log").read_text()
    steps = steps_of(events)
    assert steps[2]["kl"] > 0.0 and steps[2]["kl_coef"] != 0.2  # the controller moved after the first batch's KL
    final = run_dir / "final"
    assert sorted(load_file(str(final / "value_head.safetensors"))) == ["v_head.summary.bias", "v_head.summary.weight"]
    assert not any("v_head" in k for k in load_file(str(final / "model.safetensors")))
    # ftui eval: final/'s answers to the prompts, scored by the run's reward model
    out = subprocess.run([sys.executable, "-m", "ftui.cli.main", "eval", str(run_dir), "--dataset", str(tmp_path / "sums.json"),
                          "--max-samples", "3"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    results = json.loads((Path(out.stdout.strip().splitlines()[-1].strip()) / "eval_results.json").read_text())
    assert isinstance(results["eval_reward"], float) and results["eval_loss"] is None and results["examples"] == 3


@pytest.mark.slow
def test_a_ppo_run_resumed_at_a_batch_boundary_makes_the_uninterrupted_runs_rollouts(tmp_path):
    cfg = ppo_config(tmp_path, max_steps=6, save_steps=2, ppo_score_norm=True)
    run_dir, events, proc = train_sync(cfg)
    assert proc.returncode == 0, (run_dir / "train.log").read_text()[-3000:]
    whole = read_rollouts(run_dir)
    state = json.loads((run_dir / "checkpoints" / "step-2" / "trainer_state.json").read_text())["stage"]
    # after one batch: its KL was 0 (policy = reference), so the coefficient fell by 20 % x 4 / 10000; 4 scores counted
    assert state["kl_coef"] == pytest.approx(0.2 * (1 - 0.2 * 4 / 10000), rel=1e-12) and state["score_count"] == pytest.approx(4)
    copy = tmp_path / "copy"
    shutil.copytree(run_dir, copy)
    (copy / "rollouts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in whole if r["step"] <= 4))
    resumed, proc = resume_sync(copy, copy / "checkpoints" / "step-4")
    assert proc.returncode == 0, proc.stderr[-3000:]
    again = read_rollouts(copy)
    assert len(again) == len(whole) and again == whole
    later = {s["step"]: s for s in steps_of(events)}
    for s in steps_of(resumed):
        for name in ("reward", "kl", "kl_coef", "value_loss"):
            if name in s:
                assert s[name] == pytest.approx(later[s["step"]][name], rel=1e-5), (name, s["step"])


@pytest.mark.slow
def test_a_ppo_run_resumed_inside_a_batch_makes_it_again_and_says_so(tmp_path):
    run_dir, _events, proc = train_sync(ppo_config(tmp_path, max_steps=4, save_steps=3))
    assert proc.returncode == 0, (run_dir / "train.log").read_text()[-3000:]
    resumed, proc = resume_sync(run_dir, run_dir / "checkpoints" / "step-3")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert [s["step"] for s in steps_of(resumed)] == [4]
    assert any(e["event"] == "log" and "resumed inside a rollout batch" in e.get("message", "") for e in resumed)


@pytest.mark.dist
@pytest.mark.slow
@pytest.mark.parametrize("engine", ["ddp", "fsdp"])
def test_two_ranks_answer_their_share_and_gather_the_figures(tmp_path, engine):
    cfg = ppo_config(tmp_path, engine=engine, nproc_per_node=2, per_device_train_batch_size=2, max_steps=4)
    run_dir, events, proc = train_sync(cfg)
    assert proc.returncode == 0, (run_dir / "train.log").read_text()[-3000:]
    assert next(e for e in events if e["event"] == "run_start")["world_size"] == 2
    rows = read_rollouts(run_dir)
    assert len(rows) == 2 * 4 and [r["group"] for r in rows[:4]] == [0, 1, 2, 3]  # both ranks' answers, rank 0 writing
    first = steps_of(events)[0]
    assert first["reward"] == pytest.approx(sum(r["reward"] for r in rows[:4]) / 4, abs=1e-5)
