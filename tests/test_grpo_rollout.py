"""GRPO's rollouts (ftui.runner.rollout): completions keep their first stop id and say when they
were cut, sampling is seeded per generation (a resumed run regenerates them), the LoRA adapter
is active while generating, the global prompt order and each rank's slice, and the micro
batch's layout and loss units."""

from __future__ import annotations

import contextlib
from types import SimpleNamespace

import pytest
import torch

from ftui.runner.data import IGNORE
from ftui.runner.rollout import Rollouts, completion_of, prompt_order, rollout_batch
from ftui.stages import describe


def tiny_model():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(vocab_size=40, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                        num_attention_heads=2, num_key_value_heads=1, pad_token_id=0))


def rollouts(model, stop_ids, **options):
    values = {"num_generations": 2, "max_completion_length": 5} | options
    engine = SimpleNamespace(unwrap=lambda: model, model=model, device=torch.device("cpu"), autocast=contextlib.nullcontext,
                             info=SimpleNamespace(rank=0, world_size=1))
    cfg = SimpleNamespace(gradient_accumulation_steps=1, per_device_train_batch_size=2, seed=7)
    return Rollouts(cfg, describe("grpo").read_options(values), engine, SimpleNamespace(head=None), [], None, stop_ids, 0)


PROMPTS = [[5, 6, 7], [8, 9]]


def test_a_completion_keeps_its_first_stop_id_and_one_without_is_cut():
    assert completion_of([4, 3, 2, 3, 0], {3}) == ([4, 3], False)
    assert completion_of([4, 5, 6], {3}) == ([4, 5, 6], True)
    model = tiny_model()
    never = rollouts(model, [39], temperature=1e-4)  # an id the near-greedy model does not pick first
    cut, truncated = never.sample(PROMPTS, 0)
    greedy_first = [c[0] for c in cut]
    assert 39 not in greedy_first  # the seeded tiny model's pick: the rows run to max_completion_length
    assert [len(c) for c in cut] == [5, 5] and truncated == [True, True]
    stopping = rollouts(model, [greedy_first[0]], temperature=1e-4)
    done, truncated = stopping.sample(PROMPTS[:1], 0)
    assert done == [[greedy_first[0]]] and truncated == [False]  # the stop id is the completion's last token


def test_sampling_is_seeded_per_generation_and_leaves_the_global_rng_alone():
    r = rollouts(tiny_model(), [39])
    state = torch.random.get_rng_state()
    first = r.sample(PROMPTS * 2, 3)
    assert torch.equal(state, torch.random.get_rng_state())
    assert r.sample(PROMPTS * 2, 3) == first and r.sample(PROMPTS * 2, 4) != first


def test_the_lora_adapter_is_active_while_generating():
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(tiny_model(), LoraConfig(r=4, target_modules=["q_proj", "v_proj", "o_proj"], lora_alpha=64))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 1.0)  # a trained adapter: non-zero
    r = rollouts(model, [39])
    with_adapter = r.sample(PROMPTS * 4, 0)
    with model.disable_adapter():
        without = r.sample(PROMPTS * 4, 0)
    assert with_adapter != without and r.sample(PROMPTS * 4, 0) == with_adapter
    assert model.training  # back in train mode after the rollout


def test_the_prompt_order_is_a_seeded_permutation_per_epoch():
    first = prompt_order(5, 1, 0, 5)
    assert sorted(first) == list(range(5))
    assert prompt_order(5, 1, 3, 4) == first[3:] + prompt_order(5, 2, 0, 2)  # the next epoch: seed + 1
    assert prompt_order(5, 1, 0, 10)[5:] == prompt_order(5, 2, 0, 5) != first
    # generations of 2 prompts: an epoch takes the 4 that fill whole generations, the 5th is left out
    assert prompt_order(5, 1, 0, 6, used=4) == first[:4] + prompt_order(5, 2, 0, 2)


def test_an_epoch_is_the_whole_generations_its_prompts_fill_as_trl_counts_it():
    """TRL's RepeatSampler drops the prompts that do not fill a generation; an optimizer step
    takes gradient_accumulation_steps of the steps_per_generation x num_iterations micro
    batches a generation serves."""
    from ftui.data.records import DataFormatError
    from ftui.runner.stages.grpo import GRPOStage

    def steps(examples, accum=1, world=1, **options):
        cfg = SimpleNamespace(per_device_train_batch_size=4, gradient_accumulation_steps=accum, world_size=world,
                              tokenized_path=None, num_generations=2, beta=0.0, **options)
        stage = GRPOStage.__new__(GRPOStage)
        stage.cfg, stage.options = cfg, describe("grpo").read_options(vars(cfg))
        return stage.steps_per_epoch(examples, 0, accum, world)

    assert steps(10) == 5 and steps(11) == 5  # 2 prompts a generation; the 11th is dropped
    assert steps(10, num_iterations=2) == 10 and steps(10, accum=2, num_iterations=2) == 4  # spg = accum: 4 prompts
    assert steps(10, steps_per_generation=2) == 4  # 4 prompts a generation: 2 of them fill 4 micro batches
    assert steps(10, world=2) == 2  # 4 prompts a generation
    with pytest.raises(DataFormatError, match="fewer than one generation"):
        steps(3, world=2)


@pytest.mark.parametrize("loss_type, units", [("dapo", 5.0), ("grpo", 2.0), ("dr_grpo", 2.0), ("bnpo", 1.0)])
def test_a_rollout_batch_lays_prompt_and_completion_end_to_end(loss_type, units):
    batch = rollout_batch([[5, 6, 7], [8]], [[1, 2, 3], [4, 9]], [False, True], torch.tensor([1.0, -1.0]), 0, loss_type,
                          mask_truncated=False)
    assert batch.input_ids.tolist() == [[5, 6, 7, 1, 2, 3], [8, 4, 9, 0, 0, 0]]
    assert batch.labels.tolist() == [[IGNORE] * 3 + [1, 2, 3], [IGNORE, 4, 9] + [IGNORE] * 3]
    assert batch.mask.tolist() == [[0, 0, 1, 1, 1], [1, 1, 0, 0, 0]] and batch.loss_tokens == units
    masked = rollout_batch([[5, 6, 7], [8]], [[1, 2, 3], [4, 9]], [False, True], torch.zeros(2), 0, "dapo", mask_truncated=True)
    assert masked.mask[1].sum() == 0 and masked.loss_tokens == 3.0


def test_sampling_takes_trls_settings_and_not_the_models_generation_config():
    """TRL sets repetition_penalty (1.0) itself: a chat model's generation_config value must not
    leak into the rollouts; top_k 0 is off whatever the model's config says."""
    model = tiny_model()
    plain = rollouts(model, [39]).sample(PROMPTS * 4, 0)
    model.generation_config.repetition_penalty, model.generation_config.top_k = 50.0, 1
    assert rollouts(model, [39]).sample(PROMPTS * 4, 0) == plain
    assert rollouts(model, [39], repetition_penalty=50.0).sample(PROMPTS * 4, 0) != plain
    assert rollouts(model, [39], min_p=0.9).sample(PROMPTS * 4, 0) != plain
