"""The planner's terms for a stage that generates its rollouts (PlannerTerms.generation: grpo, ppo),
checked with a test-only stage description (the built-in grpo's sets the same terms)."""

from __future__ import annotations

import pytest

import ftui.plan.planner as planner
from ftui.plan.generation import Rollout, kv_cache_bytes, rollout_of
from ftui.plan.model_shape import ModelShape
from ftui.plan.planner import estimate
from ftui.stages import describe
from ftui.stages.description import CONVERSATIONS, PlannerTerms, StageDescription, StageOption

QWEN_1_5B = ModelShape.from_config({"model_type": "qwen2", "vocab_size": 151936, "hidden_size": 1536,
                                    "intermediate_size": 8960, "num_hidden_layers": 28, "num_attention_heads": 12,
                                    "num_key_value_heads": 2, "tie_word_embeddings": True})
OPTIONS = (StageOption("num_generations", "group", "completions per prompt", 8, int, ge=2),
           StageOption("max_completion_length", "completion", "the most new tokens", 256, int, ge=1),
           StageOption("steps_per_generation", "spg", "micro batches a generation", 0, int, ge=0),
           StageOption("beta", "KL weight", "0: no reference model", 0.0, ge=0.0))
TOYGEN = StageDescription(name="toygen", short="toy", help="a generating toy", order=99, data=CONVERSATIONS,
                          options=OPTIONS, reference_model=lambda o: o["beta"] != 0,
                          planner=PlannerTerms(generation=True))
TOYPPO = StageDescription(name="toyppo", short="toy", help="a generating toy with a value head", order=98,
                          data=CONVERSATIONS, options=OPTIONS[1:2], value_head=True,
                          planner=PlannerTerms(generation=True))


@pytest.fixture(autouse=True)
def toy_stages(monkeypatch):
    toys = {d.name: d for d in (TOYGEN, TOYPPO)}
    monkeypatch.setattr(planner, "describe_stage", lambda name: toys.get(name) or describe(name))


def plan(options=None, **kw):
    values = {**TOYGEN.option_values({}), **(options or {})}
    kw = {"method": "lora", "precision": "bf16", "micro_batch": 4, "seq_len": 512, **kw}
    return estimate(QWEN_1_5B, training_stage=kw.pop("stage", "toygen"), stage_options=values, **kw)


def test_the_kv_cache_is_two_tensors_per_layer_over_every_token_of_every_completion():
    rollout = Rollout(completions=16, prompt_len=512, completion_len=256)
    assert kv_cache_bytes(QWEN_1_5B, rollout, 2) == 2 * 28 * 2 * 128 * 2 * (512 + 256) * 16


def test_completions_at_once_are_the_micro_batches_of_a_generation_and_at_least_a_groups_share():
    def at_once(options, **kw):
        return rollout_of(options, **{"micro_batch": 4, "seq_len": 512, "gradient_accumulation_steps": 2,
                                      "world_size": 1, **kw}).completions
    assert at_once({"num_generations": 8}) == 8  # 4 per micro batch x gradient accumulation 2
    assert at_once({"num_generations": 8, "steps_per_generation": 4}) == 16
    assert at_once({"num_generations": 32}) == 32  # a group larger than the batch: its share, whole
    assert at_once({"num_generations": 32}, world_size=4) == 8


def test_the_rollout_grows_with_max_completion_length():
    short, long = plan({"max_completion_length": 128}), plan({"max_completion_length": 1024})
    assert 0 < short.generation < long.generation
    assert short.activations < long.activations  # the training rows are prompt + completion too
    assert short.total < long.total
    assert any("KV cache" in note for note in long.notes)


def test_the_rollout_grows_with_the_group_when_a_group_outgrows_the_batch():
    small, big = plan({"num_generations": 4}), plan({"num_generations": 64})
    kv = kv_cache_bytes(QWEN_1_5B, Rollout(64, 512, 256), 2) - kv_cache_bytes(QWEN_1_5B, Rollout(4, 512, 256), 2)
    assert big.generation - small.generation >= kv
    assert small.total < big.total


def test_a_long_rollout_sets_the_peak_when_it_outweighs_the_activations():
    e = plan({"max_completion_length": 8192, "num_generations": 64}, gradient_checkpointing=True)
    assert e.generation > e.activations
    assert e.total == pytest.approx(e.weights + e.optimizer + e.generation)  # one process: gradients freed by then
    sft = estimate(QWEN_1_5B, method="lora", precision="bf16", micro_batch=4, seq_len=512)
    assert sft.generation == 0 and not any("KV cache" in note for note in sft.notes)


def test_a_reference_copy_is_counted_when_beta_is_not_zero():
    without, with_kl = plan({"beta": 0.0}, method="full"), plan({"beta": 0.04}, method="full")
    assert with_kl.weights - without.weights == pytest.approx(QWEN_1_5B.params * 4)
    assert any("reference" in note for note in with_kl.notes)
    assert not any("reference" in note for note in without.notes)
    lora = plan({"beta": 0.04})  # LoRA's reference is the base with the adapter off: nothing more
    assert lora.weights == plan({"beta": 0.0}).weights


def test_zero3_gathers_the_whole_model_for_the_rollout():
    kw = {"method": "full", "world_size": 4}
    z3, z2 = plan(engine="zero3", **kw), plan(engine="zero2", **kw)
    assert z3.generation - z2.generation == pytest.approx(QWEN_1_5B.params * 2 * 3 / 4)


def test_a_value_head_beside_the_logits_trains_its_hidden_size_plus_one():
    assert plan(stage="toyppo").trainable - plan().trainable == QWEN_1_5B.hidden + 1


def test_ppo_counts_its_reward_model_and_its_rollout_batch():
    """ppo (the built-in): the reward model's weights whole on each GPU in the compute type, and a
    rollout of per_device x gradient accumulation x ppo_buffer_size answers of max_new_tokens."""
    ppo = describe("ppo")
    base = {**ppo.option_values({}), "max_new_tokens": 128}
    one, two = (estimate(QWEN_1_5B, training_stage="ppo", stage_options=base | {"ppo_buffer_size": n}, method="lora",
                         precision="bf16", micro_batch=2, seq_len=256, gradient_accumulation_steps=2) for n in (1, 2))
    assert any("reward model" in note for note in one.notes)
    assert rollout_of(base, micro_batch=2, seq_len=256, gradient_accumulation_steps=2, world_size=1) == Rollout(4, 256, 128)
    assert rollout_of(base | {"ppo_buffer_size": 2}, micro_batch=2, seq_len=256, gradient_accumulation_steps=2,
                      world_size=1) == Rollout(8, 256, 128)
    assert two.generation > one.generation
    sft = estimate(QWEN_1_5B, training_stage="sft", method="lora", precision="bf16", micro_batch=2, seq_len=256 + 128,
                   gradient_accumulation_steps=2)
    assert one.weights - sft.weights == pytest.approx(QWEN_1_5B.params * 2)
