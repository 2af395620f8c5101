"""What ftui says about TRL's GRPOConfig keys (1.16) that it does not implement: a table, not code.

A user who brings a TRL GRPO config brings these keys. Each would change what is trained (or, for
the logging ones, asks for something ftui does another way), so the run is refused, as for any key
ftui does not know, but by name with what ftui does instead and what to do, rather than "unknown
key". The GRPOConfig keys ftui implements are ``stage: grpo``'s options (ftui.stages.grpo). No torch.
"""

from __future__ import annotations

from ftui.i18n import N_

_TRL_GROUPS: list[tuple[str, str]] = [
    ("use_vllm vllm_mode vllm_model_impl vllm_enable_sleep_mode vllm_structured_outputs_regex vllm_server_base_url "
     "vllm_server_host vllm_server_port vllm_server_timeout vllm_group_port vllm_gpu_memory_utilization "
     "vllm_max_model_length vllm_tensor_parallel_size vllm_importance_sampling_correction vllm_importance_sampling_mode "
     "vllm_importance_sampling_clip_max vllm_importance_sampling_clip_min vllm_importance_sampling_cap "
     "use_transformers_continuous_batching transformers_continuous_batching_config use_transformers_paged "
     "cache_implementation generation_kwargs",
     N_("ftui generates the rollouts with transformers' generate on the training model (KV cache; temperature, top_p, "
        "top_k, min_p, repetition_penalty), without vLLM or other generation settings; remove the key")),
    ("importance_sampling_level delta off_policy_mask_threshold top_entropy_quantile entropy_coef use_adaptive_entropy "
     "entropy_coef_min entropy_coef_max entropy_coef_delta entropy_target multi_objective_aggregation "
     "sapo_temperature_neg sapo_temperature_pos vespo_k_pos vespo_lambda_pos vespo_k_neg vespo_lambda_neg",
     N_("ftui computes TRL's default GRPO here (a ratio per token, every completion token, no entropy bonus, the "
        "weighted rewards summed before the advantages); remove the key")),
    ("sync_ref_model ref_model_mixup_alpha ref_model_sync_steps",
     N_("ftui's reference model stays the run's starting model (TRL's default); syncing it to the policy is not "
        "implemented; remove the key")),
    ("generation_batch_size",
     N_("ftui's generation batch is per_device_train_batch_size x processes x steps_per_generation; set "
        "steps_per_generation instead")),
    ("max_prompt_length", N_("ftui cuts the prompts at cutoff_len (LLaMA-Factory's key); set cutoff_len instead")),
    ("num_generations_eval", N_("ftui's eval generates num_generations completions of each eval prompt; remove the key")),
    ("shuffle_dataset", N_("ftui always shuffles the prompts, seeded by seed (TRL's default); remove the key")),
    ("ds3_gather_for_generation",
     N_("ftui gathers ZeRO-3's parameters for generation (TRL's default, true); remove the key")),
    ("disable_dropout cast_lm_head_to_fp32",
     N_("ftui trains the model as its config.json sets it (TRL's default: false); remove the key")),
    ("chat_template_kwargs tools max_tool_calling_iterations",
     N_("ftui renders each prompt with the run's template and generates one completion, without tools; remove the key")),
    ("log_completions log_multimodal num_completions_to_print log_unique_prompts log_completions_hub_repo",
     N_("ftui writes every rollout to rollouts.jsonl in the run directory (ftui rollouts RUN shows them); remove the "
        "key")),
]
TRL_REFUSED: dict[str, str] = {key: why for keys, why in _TRL_GROUPS for key in keys.split()}
