"""`stage: grpo`'s config: TRL's GRPOConfig keys with their defaults, validated, the generation
batch holding whole groups, what the stage refuses, and its options kept in the run's config.yaml."""

from __future__ import annotations

from ftui.config.preflight import validate_config
from ftui.stages import describe


def problems(**keys):
    base = dict(model_name_or_path="m", dataset="d", stage="grpo", per_device_train_batch_size=8)
    _cfg, found = validate_config(base | keys)
    return {p.field: p.message for p in found}


def test_the_options_are_trls_with_its_defaults():
    options = describe("grpo").read_options({})
    assert (options.num_generations, options.max_completion_length, options.temperature, options.top_p,
            options.top_k, options.beta, options.epsilon, options.loss_type, options.scale_rewards,
            options.num_iterations, options.mask_truncated_completions) == (8, 256, 1.0, 1.0, 0, 0.0, 0.2, "dapo",
                                                                             "group", 1, False)
    assert not describe("grpo").needs_reference({}) and describe("grpo").needs_reference({"beta": 0.04})
    assert options.use_bias_correction_kl and (options.min_p, options.repetition_penalty) == (0.0, 1.0)  # TRL 1.16's


def test_a_valid_grpo_config_has_no_problem():
    assert problems() == {}
    assert problems(num_generations=4, gradient_accumulation_steps=3, loss_type="dr_grpo", scale_rewards="none") == {}


def test_grpo_refuses_bad_values_by_name():
    assert "num_generations" in problems(num_generations=1)
    assert "whole groups" in problems(num_generations=3)["num_generations"]  # 8 completions in groups of 3
    assert not problems(num_generations=3, steps_per_generation=3)  # 24 completions
    assert "loss_type" in problems(loss_type="cispo")
    assert "scale_rewards" in problems(scale_rewards="yes")
    assert "packing" in problems(packing=True)
    assert "learns from the last answer" in problems(train_on_prompt=True)["train_on_prompt"]
    assert "unknown key" in problems(vllm_enforce_typo=True)["vllm_enforce_typo"]


def test_trls_grpo_keys_ftui_does_not_implement_are_refused_by_name_with_what_to_do():
    """A TRL GRPO config's keys: refused (they would change the result), each saying what ftui does instead."""
    from ftui.presets.trl_keys import TRL_REFUSED
    from ftui.config.rules import known_key_names

    assert "transformers' generate" in problems(use_vllm=True)["use_vllm"]
    assert "set steps_per_generation" in problems(generation_batch_size=16)["generation_batch_size"]
    assert "set cutoff_len" in problems(max_prompt_length=512)["max_prompt_length"]
    assert "reference model stays" in problems(sync_ref_model=True)["sync_ref_model"]  # not "did you mean ref_model?"
    for key in ("importance_sampling_level", "delta", "top_entropy_quantile", "log_completions"):
        assert problems(**{key: 1})[key].startswith("TRL's key, not implemented by ftui")
    # the table only speaks for keys nobody else reads: none is ftui's, LLaMA-Factory's or a stage option
    assert not set(TRL_REFUSED) & (known_key_names() | set(describe("grpo").option_keys))


def test_the_world_counts_in_the_generation_batch():
    assert "2 processes" in problems(num_generations=16, engine="ddp", nproc_per_node=2, per_device_train_batch_size=4,
                                     device="cpu")["num_generations"]
    assert "num_generations" not in problems(num_generations=16, engine="ddp", nproc_per_node=2, per_device_train_batch_size=8,
                                             device="cpu")


def test_the_stages_own_options_are_kept_in_the_saved_config():
    cfg, _found = validate_config(dict(model_name_or_path="m", dataset="d", stage="grpo", num_generations=4, per_device_train_batch_size=4,
                                       disable_tqdm=True))
    saved = cfg.to_dict(include_unsupported=False)
    assert saved["num_generations"] == 4 and "disable_tqdm" not in saved


def test_the_sampling_keys_are_not_said_to_have_no_effect_for_grpo():
    from ftui.config.problems import unsupported_warning

    extra = {"temperature": 0.7, "top_p": 0.9, "repetition_penalty": 1.1, "disable_tqdm": True}
    assert unsupported_warning(extra, "grpo").endswith("disable_tqdm")
    assert "temperature" in unsupported_warning(extra, "sft") and "repetition_penalty" in unsupported_warning(extra, "sft")
    options = describe("grpo").read_options({"repetition_penalty": 1.1, "min_p": 0.05})
    assert (options.repetition_penalty, options.min_p) == (1.1, 0.05)
    assert "min_p" in problems(min_p=1.5) and "repetition_penalty" in problems(repetition_penalty=0)


def test_tokenized_path_is_refused_for_grpo():
    assert "reward functions" in problems(tokenized_path="/tmp/x")["tokenized_path"]
