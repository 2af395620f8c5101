"""`stage: grpo` end to end: a short run writes its rollouts, figures and final/; a run resumed
from a checkpoint makes exactly the rollouts the uninterrupted run made; groups that straddle
two ranks get the advantages one process computes from the gathered rewards (ddp and fsdp);
a reward function's error ends the run with its message; and the toy task: a tiny model learns
to add two one-digit numbers from a verifiable reward (tests/test_grpo_toy.py's helper)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from conftest import resume_sync, steps_of, tiny_config, train_sync
from ftui.rundir.rollouts import read_rollouts
from ftui.runner.grpo_loss import group_advantages

LENGTH_REWARD = '''
def score(prompts, completions, completion_ids, reference, **columns):
    """A reward that varies within a group: the completion's characters modulo 5, None for an empty one."""
    assert len(reference) == len(completions) and "record" in columns and "instruction" in columns
    return [float(len(c) % 5) if c else None for c in completions]
'''


def sums_data(folder: Path, numbers: range = range(5)) -> Path:
    rows = [{"instruction": f"{a}+{b}=", "input": "", "output": str(a + b)} for a in numbers for b in numbers]
    path = folder / "sums.json"
    path.write_text(json.dumps(rows))
    return path


def grpo_config(tmp_path: Path, reward: str = LENGTH_REWARD, **overrides):
    (tmp_path / "rewards.py").write_text(reward)
    over = dict(stage="grpo", dataset=str(sums_data(tmp_path)), max_samples=None, cutoff_len=32, num_generations=4,
                per_device_train_batch_size=8, max_completion_length=6, max_steps=3, logging_steps=1,
                reward_funcs=f"{tmp_path / 'rewards.py'}:score", learning_rate=1e-3)
    return tiny_config(tmp_path, **(over | overrides))


def test_a_short_grpo_run_writes_rollouts_figures_evals_and_final(tmp_path):
    cfg = grpo_config(tmp_path, eval_dataset=str(tmp_path / "sums.json"), max_samples=4, per_device_eval_batch_size=8)
    run_dir, events, proc = train_sync(cfg)
    assert proc.returncode == 0, (run_dir / "train.log").read_text()[-3000:]
    steps = steps_of(events)
    assert [s["step"] for s in steps] == [1, 2, 3]
    assert steps[-1]["epoch"] == pytest.approx(1.5)  # an epoch: 4 prompts x 4 completions = 2 steps of 8 completions
    for name in ("reward", "reward_std", "reward_score", "completion_length", "clipped_ratio", "frac_reward_zero_std",
                 "entropy", "clip_ratio"):
        assert all(isinstance(s.get(name), float) for s in steps), name
    assert "kl" not in steps[0]  # beta 0: no reference model, no kl (as TRL logs it)
    rows = read_rollouts(run_dir)
    assert len(rows) == 3 * 8 and {r["step"] for r in rows} == {1, 2, 3}
    assert all(r["length"] <= 6 and (r["length"] == 6 or not r["truncated"]) for r in rows)
    first = [r for r in rows if r["generation"] == 0]
    assert [r["group"] for r in first] == [0, 0, 0, 0, 1, 1, 1, 1] and [r["sample"] for r in first] == [0, 1, 2, 3] * 2
    assert all(r["reference"] == str(eval(r["prompt"].split("user\n")[1].split("=")[0])) for r in first)
    ev = [e for e in events if e["event"] == "eval"][-1]
    assert ev["eval_loss"] is None and isinstance(ev["eval_reward"], float) and "eval_reward_score" in ev
    assert (run_dir / "final" / "model.safetensors").is_file()
    # ftui eval scores final/'s completions of the prompts with the run's reward functions
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "ftui.cli.main", "eval", str(run_dir), "--dataset", str(tmp_path / "sums.json"),
                          "--max-samples", "2"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    results = json.loads((Path(out.stdout.strip().splitlines()[-1].strip()) / "eval_results.json").read_text())
    assert isinstance(results["eval_reward"], float) and "eval_reward_score" in results and results["eval_loss"] is None


def test_a_resumed_grpo_run_makes_the_rollouts_the_uninterrupted_one_made(tmp_path):
    cfg = grpo_config(tmp_path, max_steps=6, save_steps=3)
    run_dir, _events, proc = train_sync(cfg)
    assert proc.returncode == 0, (run_dir / "train.log").read_text()[-3000:]
    whole = read_rollouts(run_dir)
    copy = tmp_path / "copy"
    shutil.copytree(run_dir, copy)
    kept = [r for r in whole if r["step"] <= 3]  # what a run stopped at step 3 had written
    (copy / "rollouts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in kept))
    resumed, proc = resume_sync(copy, copy / "checkpoints" / "step-3")
    assert proc.returncode == 0, proc.stderr[-3000:]
    again = read_rollouts(copy)
    assert len(again) == len(whole) and again == whole
    assert [s["step"] for s in steps_of(resumed)] == [4, 5, 6]


def advantages_of(rows: list[dict], group: int) -> tuple[list[float], list[float]]:
    """The advantages one process computes from the written rewards, generation by generation."""
    want, got = [], []
    for g in sorted({r["generation"] for r in rows}):
        gen = [r for r in rows if r["generation"] == g]
        rewards = torch.tensor([[r["rewards"]["score"] if r["rewards"]["score"] is not None else float("nan")] for r in gen])
        want += group_advantages(rewards, torch.ones(1), group, "group")[0].tolist()
        got += [r["advantage"] for r in gen]
    return want, got


@pytest.mark.dist
@pytest.mark.parametrize("engine", ["ddp", "fsdp", pytest.param("zero3", marks=pytest.mark.slow)])
def test_groups_straddling_two_ranks_get_the_advantages_of_all_their_rewards(tmp_path, engine):
    cfg = grpo_config(tmp_path, engine=engine, nproc_per_node=2, per_device_train_batch_size=2, max_steps=2)
    run_dir, events, proc = train_sync(cfg)
    assert proc.returncode == 0, (run_dir / "train.log").read_text()[-3000:]
    start = next(e for e in events if e["event"] == "run_start")
    assert start["engine"] == engine and start["world_size"] == 2
    rows = read_rollouts(run_dir)
    assert len(rows) == 2 * 4  # every rank's two completions of the one group, written by rank 0
    first = [r for r in rows if r["generation"] == 0]
    assert [r["group"] for r in first] == [0, 0, 0, 0] and len({r["completion"] for r in first}) > 1
    want, got = advantages_of(rows, 4)
    assert got == pytest.approx(want, abs=1e-5) and any(abs(a) > 0.1 for a in got)
    ranks = next(s for s in steps_of(events) if "ranks" in s)["ranks"]
    if engine != "ddp":  # sharded: each rank holds part of the parameters
        assert ranks[0]["param_elements"] < start["total_params"]


def test_a_reward_function_that_fails_ends_the_run_with_its_message(tmp_path):
    cfg = grpo_config(tmp_path, reward="def score(completions, **kw):\n    return [1.0]\n")
    run_dir, events, proc = train_sync(cfg)
    end = [e for e in events if e["event"] == "run_end"][-1]
    assert end["status"] == "failed"
    text = json.dumps(end)
    assert "score" in text and "per completion" in text and "RewardError" in text and "Traceback" not in text


def test_rollouts_trained_on_twice_keep_the_policys_log_probabilities_of_when_they_were_made(tmp_path):
    """num_iterations 2: each generation serves two optimizer steps; the second step's ratio
    is against the log-probabilities at generation (TRL's old_per_token_logps), so it moves."""
    cfg = grpo_config(tmp_path, num_iterations=2, max_steps=4, learning_rate=5e-3)
    run_dir, events, proc = train_sync(cfg)
    assert proc.returncode == 0, (run_dir / "train.log").read_text()[-3000:]
    rows = read_rollouts(run_dir)
    assert sorted({(r["generation"], r["step"]) for r in rows}) == [(0, 1), (1, 3)]
    steps = steps_of(events)
    assert steps[0]["clip_ratio"] == 0 and steps[1]["clip_ratio"] > 0  # step 1 on-policy; step 2 off by one update


@pytest.mark.parametrize("method", ["lora", "full"])
def test_beta_adds_the_kl_to_the_reference_which_starts_equal_to_the_policy(tmp_path, method):
    cfg = grpo_config(tmp_path, beta=0.04, finetuning_type=method, lora_rank=8, learning_rate=5e-3, max_steps=3)
    run_dir, events, proc = train_sync(cfg)
    assert proc.returncode == 0, (run_dir / "train.log").read_text()[-3000:]
    steps = steps_of(events)
    assert steps[0]["kl"] == pytest.approx(0.0, abs=1e-6)  # the adapter starts at zero / the copy is the start
    assert steps[-1]["kl"] > 1e-6  # the policy has moved away from it
    log = (run_dir / "train.log").read_text()
    assert ("adapter off" in log) if method == "lora" else ("frozen copy" in log)


@pytest.mark.slow  # the exact resume at a generation's end is tested in every run; this one adds 15 s
def test_a_checkpoint_inside_a_generation_resumes_by_generating_it_again_and_says_so(tmp_path):
    """steps_per_generation 2 with no accumulation: a generation serves two steps, so a
    checkpoint at step 1 falls inside one; the resumed run makes it again (same prompts and
    seed, the resumed weights) and warns that its rollouts differ."""
    cfg = grpo_config(tmp_path, steps_per_generation=2, max_steps=3, save_steps=1)
    run_dir, _events, proc = train_sync(cfg)
    assert proc.returncode == 0, (run_dir / "train.log").read_text()[-3000:]
    whole = read_rollouts(run_dir)
    assert sorted({(r["generation"], r["step"]) for r in whole}) == [(0, 1), (0, 2), (1, 3), (1, 4)]  # written when made
    resumed, proc = resume_sync(run_dir, run_dir / "checkpoints" / "step-1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    warnings = [e["message"] for e in resumed if e["event"] == "log" and e.get("level") == "warning"]
    assert any("resumed inside a generation" in w for w in warnings)
    written = [json.loads(line) for line in (run_dir / "rollouts.jsonl").read_text().splitlines()]
    again = written[len(whole):]  # the file as written (read_rollouts shows a rewritten rollout once)
    assert [(r["generation"], r["group"], r["sample"]) for r in again] == [(r["generation"], r["group"], r["sample"]) for r in whole]
    assert [r["prompt"] for r in again] == [r["prompt"] for r in whole]  # the same prompts, in the same order


def test_ftui_data_shows_the_prompts_grpo_generates_from(tmp_path):
    import subprocess
    import sys

    cfg = grpo_config(tmp_path, max_samples=2)
    path = tmp_path / "grpo.yaml"
    cfg.save(path)
    out = subprocess.run([sys.executable, "-m", "ftui.cli.main", "data", str(path), "--show", "1"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "0+0=" in out.stdout


def test_records_without_an_answer_to_end_them_are_counted_not_dropped_silently(tmp_path):
    """A sharegpt conversation that ends with the user is no grpo prompt (the answer is the
    reference): ``ftui data`` says how many records were skipped and why."""
    import subprocess
    import sys

    turns = [{"from": "human", "value": "1+1="}, {"from": "gpt", "value": "2"}]
    rows = [{"conversations": turns}, {"conversations": turns + turns[:1]}, {"conversations": turns}]
    (tmp_path / "chats.json").write_text(json.dumps(rows))
    (tmp_path / "dataset_info.json").write_text(json.dumps({"chats": {"file_name": "chats.json", "formatting": "sharegpt"}}))
    cfg = grpo_config(tmp_path, dataset="chats", dataset_dir=str(tmp_path), num_generations=2, per_device_train_batch_size=2)
    path = tmp_path / "grpo.yaml"
    cfg.save(path)
    out = subprocess.run([sys.executable, "-m", "ftui.cli.main", "data", str(path), "--show", "1"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "1 records were skipped" in " ".join((out.stdout + out.stderr).split())


def test_a_prompt_takes_all_of_cutoff_len_and_a_longer_one_keeps_its_end(tmp_path):
    """The reference answer is not generated from: a long one does not cut a prompt that fits;
    a prompt longer than cutoff_len keeps its question's end and the assistant's header."""
    import subprocess
    import sys

    rows = [{"instruction": "1+1=", "input": "", "output": "2 " * 200},
            {"instruction": "pad " * 60 + "THE-END?", "input": "", "output": "2"}]
    (tmp_path / "long.json").write_text(json.dumps(rows))
    cfg = grpo_config(tmp_path, dataset=str(tmp_path / "long.json"), cutoff_len=24, num_generations=2,
                      per_device_train_batch_size=2)
    path = tmp_path / "grpo.yaml"
    cfg.save(path)
    out = subprocess.run([sys.executable, "-m", "ftui.cli.main", "data", str(path), "--show", "2"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    text = " ".join((out.stdout + out.stderr).split())
    assert "1 prompts were longer than cutoff_len=24" in text  # the first fits, its long reference aside
    assert "THE-END?" in text and "1+1=" in text
