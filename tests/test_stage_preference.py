"""`stage: dpo / kto / rm` end to end (issue 15) on LLaMA-Factory's demo preference data: each
learns in its own figure (pairs or examples evaluated are the training ones: eval_dataset is
the training set), DPO under a sharded engine with full fine-tuning (the reference copy
sharded too), exact resume, final/ usable (chat for dpo, scoring for rm), LLaMA-Factory's own
example YAMLs through `ftui train`, and what the config and the data checks refuse. (Losses
and encoding against LLaMA-Factory itself: tests/test_preference_reference.py.)"""

from __future__ import annotations

import json
import re
from pathlib import Path
import shutil
import subprocess
import sys

import pytest
import yaml

from conftest import resume_sync, steps_of, tiny_config, train_sync
from ftui.config.preflight import validate_config
from tests.test_lf_examples import EXAMPLES, test_model  # noqa: F401  (test_model: a session fixture)


def pref_config(tmp_path, lf_data, stage="dpo", **overrides):
    dataset = "kto_en_demo" if stage == "kto" else "dpo_en_demo"
    over = dict(stage=stage, dataset=dataset, eval_dataset=dataset, dataset_dir=str(lf_data), cutoff_len=64,
                max_samples=8, per_device_train_batch_size=4, per_device_eval_batch_size=4, max_steps=10,
                eval_steps=100, logging_steps=1, finetuning_type="full", learning_rate=5e-3)
    over.update(overrides)
    return tiny_config(tmp_path, **over)


def finished(run_dir, proc, events, stage):
    assert proc.returncode == 0, (run_dir / "train.log").read_text()[-4000:]
    assert next(e for e in events if e["event"] == "run_start")["stage"] == stage
    evals = [e for e in events if e["event"] == "eval"]
    assert evals, "the run evaluated its training pairs at the end"
    return steps_of(events), evals[-1]


def test_dpo_with_lora_separates_the_training_pairs_and_chats(tmp_path, lf_data):
    cfg = pref_config(tmp_path, lf_data, finetuning_type="lora", lora_rank=16, learning_rate=2e-2, max_steps=16)
    run_dir, events, proc = train_sync(cfg)
    steps, last = finished(run_dir, proc, events, "dpo")
    # the reference is the policy with its adapter off: identical at the start, so loss ln 2 and margin 0
    assert steps[0]["loss"] == pytest.approx(0.6931, abs=1e-3) and steps[0]["rewards_margin"] == pytest.approx(0, abs=1e-4)
    for name in ("rewards_chosen", "rewards_rejected", "rewards_margin", "rewards_accuracy", "logps_chosen", "logps_rejected"):
        assert name in steps[-1] and f"eval_{name}" in last
    assert last["eval_rewards_margin"] > 0.5 and last["eval_rewards_accuracy"] >= 0.9
    assert "adapter off" in (run_dir / "train.log").read_text()
    assert (run_dir / "final" / "adapter_config.json").is_file()
    # final/ is an adapter over the base as for SFT: chat loads and answers with it
    out = subprocess.run([sys.executable, "-m", "ftui.cli.main", "chat", "--run", str(run_dir), "--prompt", "Hi!",
                          "--temperature", "0", "--max-new-tokens", "8", "--device", "cpu"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.rstrip("\n"), out.stderr[-2000:]  # some answer (random weights: any text)


@pytest.mark.dist
def test_dpo_full_under_fsdp_shards_the_reference_and_learns(tmp_path, lf_data):
    cfg = pref_config(tmp_path, lf_data, engine="fsdp", nproc_per_node=2, per_device_train_batch_size=2,
                      per_device_eval_batch_size=2, max_steps=12)
    run_dir, events, proc = train_sync(cfg)
    steps, last = finished(run_dir, proc, events, "dpo")
    start = next(e for e in events if e["event"] == "run_start")
    ranks = next(s["ranks"] for s in steps if s.get("ranks"))
    assert len(ranks) == 2 and ranks[0]["param_elements"] < start["total_params"] * 0.6  # the policy is sharded
    held = re.findall(r"reference model = a frozen copy placed by fsdp: (\d+) of (\d+)", (run_dir / "train.log").read_text())
    assert len(held) == 2 and all(int(h) < int(total) * 0.6 for h, total in held)  # so is the reference
    assert steps[0]["loss"] == pytest.approx(0.6931, abs=1e-3)
    assert last["eval_rewards_margin"] > 0.5 and last["eval_rewards_accuracy"] >= 0.9


def test_kto_learns_which_answers_are_desirable(tmp_path, lf_data):
    cfg = pref_config(tmp_path, lf_data, stage="kto", max_steps=16)
    run_dir, events, proc = train_sync(cfg)
    steps, last = finished(run_dir, proc, events, "kto")
    assert steps[0]["loss"] == pytest.approx(0.5, abs=1e-3)  # 1 - sigmoid(0) at the reference
    assert {"rewards_accuracy", "rewards_margin", "kl"} <= set(steps[-1])
    assert last["eval_rewards_margin"] > 0.5 and last["eval_rewards_accuracy"] >= 0.9


def test_reward_model_ranks_the_pairs_and_final_scores_them(tmp_path, lf_data):
    import torch

    from ftui.runner.model import load_tokenizer
    from ftui.runner.reward import VALUE_HEAD_FILE, score
    from ftui.runner.weights import load_reward_model
    from ftui.runner.stages import make_stage

    cfg = pref_config(tmp_path, lf_data, stage="rm", learning_rate=1e-3, max_steps=12)
    run_dir, events, proc = train_sync(cfg)
    steps, last = finished(run_dir, proc, events, "rm")
    assert last["eval_rewards_accuracy"] >= 0.9 and last["eval_rewards_margin"] > 0.5
    final = run_dir / "final"
    assert (final / VALUE_HEAD_FILE).is_file()
    # final/ is a plain model plus the value head: loaded on its own, it ranks the same pairs
    model = load_reward_model(final)
    pairs = make_stage(cfg, load_tokenizer(cfg)).build_data(pack=False).train
    batch = make_stage(cfg, load_tokenizer(cfg)).collator()(pairs)
    scores = score(model, batch.input_ids, batch.attention_mask)
    chosen, rejected = scores[: len(pairs)], scores[len(pairs):]
    accuracy = (chosen > rejected).float().mean().item()
    # scores of order 1 computed through another batch's kernels (the run's eval, the eval job) or
    # on another CPU differ by ~1e-6 (the export below is held to 1e-5): a pair closer than 1e-4
    # to a tie may rank either way there, and move the accuracy by 1/pairs
    near_ties = ((chosen - rejected).abs() < 1e-4).sum().item() / len(pairs)
    assert abs(accuracy - last["eval_rewards_accuracy"]) <= near_ties + 1e-6
    assert (chosen - rejected).mean().item() == pytest.approx(last["eval_rewards_margin"], rel=1e-3, abs=1e-3)
    assert torch.isfinite(scores).all()
    # ftui eval reports the reward model's accuracy on pairs from final/ (its saved value head)
    out = subprocess.run([sys.executable, "-m", "ftui.cli.main", "eval", str(run_dir), "--dataset", "dpo_en_demo",
                          "--dataset-dir", str(lf_data), "--max-samples", "8"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    job = Path(out.stdout.strip().splitlines()[-1].strip())
    results = json.loads((job / "eval_results.json").read_text())
    assert abs(results["eval_rewards_accuracy"] - last["eval_rewards_accuracy"]) <= near_ties + 1e-6  # the same 8 pairs
    assert results["eval_loss"] == pytest.approx(last["eval_loss"], rel=1e-4)
    # ftui export keeps the value head, from final/ (its file) and from the last checkpoint (split
    # from the trained weights): the export scores the pairs as final/ does
    from tests.test_export import export_in_process

    for which in ("final", str(cfg.max_steps)):
        out = tmp_path / f"export-{which}"
        export_in_process(run_dir, out, which, runs_root=tmp_path / "runs")
        exported = score(load_reward_model(out), batch.input_ids, batch.attention_mask)
        assert torch.allclose(exported, scores, atol=1e-5), which


@pytest.mark.parametrize("stage,method", [("dpo", "full"), pytest.param("kto", "full", marks=pytest.mark.slow),
                                          pytest.param("rm", "lora", marks=pytest.mark.slow)])
def test_preference_runs_resume_exactly(tmp_path, lf_data, stage, method):
    """Policy (or adapter and value head), optimizer and data position come back; the reference
    is rebuilt from the same start."""
    cfg = pref_config(tmp_path, lf_data, stage=stage, finetuning_type=method, max_steps=6, save_steps=3, eval_dataset=None)
    run_dir, events, proc = train_sync(cfg)
    assert proc.returncode == 0, (run_dir / "train.log").read_text()[-3000:]
    copy = tmp_path / "copy"
    shutil.copytree(run_dir, copy)
    resumed, proc = resume_sync(copy, copy / "checkpoints" / "step-3")
    assert proc.returncode == 0, proc.stderr[-3000:]
    first = {s["step"]: (s["loss"], s["rewards_margin"]) for s in steps_of(events)}
    again = {s["step"]: (s["loss"], s["rewards_margin"]) for s in steps_of(resumed)}
    assert sorted(again) == [4, 5, 6] and all(again[k] == first[k] for k in again)


@pytest.mark.slow  # CI time: DPO with LoRA trains in test_dpo_with_lora_..., the YAMLs parse in test_lf_examples.py
@pytest.mark.parametrize("name", ["qwen3_lora_dpo.yaml", pytest.param("qwen3_lora_kto.yaml", marks=pytest.mark.slow),
                                  pytest.param("qwen3_lora_reward.yaml", marks=pytest.mark.slow)])  # CI time
def test_llamafactory_preference_examples_train(name, tmp_path, lf_data, test_model):
    data = yaml.safe_load((EXAMPLES / "train_lora" / name).read_text())
    data |= {"model_name_or_path": str(test_model), "dataset_dir": str(lf_data),
             "output_dir": str(tmp_path / "runs")}
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    # shortened with --set only: two steps of the example's own batch (1 x 8 accumulation)
    proc = subprocess.run([sys.executable, "-m", "ftui.cli.main", "train", str(path), "--set", "max_steps=2",
                           "--set", "max_samples=8", "--set", "cutoff_len=128", "--set", "logging_steps=1"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    run_dir = next((tmp_path / "runs").iterdir())
    steps = steps_of([json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()])
    assert len(steps) == 2 and ("rewards_accuracy" in steps[-1])


# --- What the config and the data checks refuse

def problems(**keys):
    base = dict(model_name_or_path="m", dataset="d", stage="dpo")
    _cfg, found = validate_config(base | keys)
    return {p.field: p.message for p in found}


def test_preference_stages_refuse_what_they_cannot_do():
    assert "packing" in problems(packing=True)
    assert "learns from the last answer" in problems(stage="kto", train_on_prompt=True)["train_on_prompt"]
    assert "sigmoid" in problems(pref_loss="hinge", dpo_label_smoothing=0.1)["dpo_label_smoothing"]
    assert "pref_loss" in problems(pref_loss="bco")
    for key, value in (("ref_model", "some/model"), ("ld_alpha", 0.5), ("pref_bco_weight", 0.5)):
        assert "not supported" in problems(**{key: value})[key]
    assert not problems(pref_loss="simpo", simpo_gamma=1.0, pref_ftx=0.5)


@pytest.mark.parametrize("stage,dataset,says", [
    ("sft", "dpo_en_demo", "fits stage dpo or rm"),
    ("dpo", "alpaca_en_demo", "no chosen/rejected answers"),
    ("rm", "kto_en_demo", "no chosen/rejected answers"),
    ("kto", "alpaca_en_demo", "no true/false kto_tag"),
])
def test_a_dataset_that_does_not_fit_the_stage_is_named(lf_data, stage, dataset, says):
    from ftui.data.dataset_files import read_records
    from ftui.data.records import DataFormatError
    from ftui.data.registry import resolve_datasets
    from ftui.data.stage_formats import check_format

    spec = resolve_datasets(dataset, str(lf_data))[0]
    with pytest.raises(DataFormatError, match=says):
        check_format(spec, read_records(spec, 1)[0], stage)


def test_a_ranking_file_given_by_path_is_recognised(tmp_path):
    from ftui.data.dataset_files import read_records
    from ftui.data.registry import resolve_datasets
    from ftui.data.stage_formats import check_format

    path = tmp_path / "pairs.json"
    path.write_text(json.dumps([{"instruction": "2+2?", "input": "", "chosen": "4", "rejected": "5"}]))
    spec = resolve_datasets(str(path), str(tmp_path))[0]
    assert check_format(spec, read_records(spec)[0], "dpo") == "alpaca ranking format"


# --- Every engine, with LoRA and with full (slow: the default suite runs FSDP above; the
# reference's placement differs per engine: adapter off, whole copy, FSDP or ZeRO-3 shards)

ENGINE_CASES = [(engine, method) for engine in ("ddp", "zero0", "zero1", "zero2", "zero3", "fsdp")
                for method in ("lora", "full")]


@pytest.mark.slow
@pytest.mark.parametrize("stage", ["dpo", "kto", "rm"])
@pytest.mark.parametrize("engine,method", ENGINE_CASES, ids=[f"{e}-{m}" for e, m in ENGINE_CASES])
def test_every_engine_trains_the_preference_stages(tmp_path, lf_data, stage, engine, method):
    cfg = pref_config(tmp_path, lf_data, stage=stage, engine=engine, finetuning_type=method, nproc_per_node=2,
                      per_device_train_batch_size=2, per_device_eval_batch_size=2, max_steps=3, eval_dataset=None)
    run_dir, events, proc = train_sync(cfg)
    assert proc.returncode == 0, (run_dir / "train.log").read_text()[-4000:]
    steps = steps_of(events)
    assert len(steps) == 3 and "rewards_accuracy" in steps[-1]
    ranks = next(s["ranks"] for s in steps if s.get("ranks"))
    assert len(ranks) == 2
    if stage != "rm":
        log = (run_dir / "train.log").read_text()
        assert ("adapter off" in log) if method == "lora" else (f"placed by {engine}" in log)
        if method == "full" and engine in ("fsdp", "zero3"):
            held = re.findall(r"placed by \w+: (\d+) of (\d+)", log)
            assert len(held) == 2 and all(int(h) < int(total) * 0.6 for h, total in held)
    assert (run_dir / "final").is_dir()


def test_tokenized_path_keeps_pairs_and_feedback_and_refuses_another_stages(tmp_path, lf_data, demo_tokenizer):
    from ftui.data.records import DataFormatError
    from ftui.runner.stages import make_stage

    for stage in ("dpo", "kto"):
        folder = tmp_path / f"tok-{stage}"
        cfg = pref_config(tmp_path, lf_data, stage=stage, tokenized_path=str(folder), eval_dataset=None)
        first = make_stage(cfg, demo_tokenizer).build_data(pack=False)  # encodes and saves
        again = make_stage(cfg, demo_tokenizer).build_data(pack=False)  # reads the folder instead
        assert any("read" in w and "tokenized_path" in w for w in again.warnings)
        assert [e.columns() for e in again.train] == [e.columns() for e in first.train] and len(first.train) == 8
        assert first.train_examples == 2 * len(first.train)  # two rows each: the FLOP estimate's sequences
    wrong = pref_config(tmp_path, lf_data, stage="rm", tokenized_path=str(tmp_path / "tok-kto"), eval_dataset=None)
    with pytest.raises(DataFormatError, match="another stage than rm"):
        make_stage(wrong, demo_tokenizer).build_data(pack=False)


def test_ftui_data_shows_both_answers_of_a_pair(tmp_path, lf_data):
    cfg = pref_config(tmp_path, lf_data, max_samples=2, eval_dataset=None)
    path = tmp_path / "dpo.yaml"
    cfg.save(path)
    out = subprocess.run([sys.executable, "-m", "ftui.cli.main", "data", str(path), "--show", "1"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "example 1 (chosen):" in out.stdout and "example 1 (rejected):" in out.stdout


def test_ftui_train_refuses_a_registry_dataset_of_another_stage_before_the_run(tmp_path, lf_data):
    from ftui.data.registry import dataset_path_problem

    assert "fits stage dpo or rm, not sft" in dataset_path_problem("alpaca_en_demo,dpo_en_demo", str(lf_data), "sft")
    assert "no kto_tag column" in dataset_path_problem("alpaca_en_demo", str(lf_data), "kto")
    assert dataset_path_problem("kto_en_demo", str(lf_data), "kto") is None
    assert dataset_path_problem("dpo_zh_demo", str(lf_data), "rm") is None
    cfg = pref_config(tmp_path, lf_data, stage="sft", dataset="dpo_en_demo", eval_dataset=None)
    path = tmp_path / "sft.yaml"
    cfg.save(path)
    out = subprocess.run([sys.executable, "-m", "ftui.cli.main", "train", str(path)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "fits stage dpo or rm" in " ".join(out.stderr.split())
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())  # no run was started
