"""What ftui does with each LLaMA-Factory key it has no field for: a table, not code.

Every key LLaMA-Factory 0.9.5 reads from a training YAML is either a ``RunConfig`` field
(implemented), listed in ``NO_EFFECT`` (it does not change what is trained: logging,
workers, timeouts, generation settings of predict; ftui warns once and goes on), or listed
in ``REFUSED`` with the reason (it would change the result and ftui cannot do it, so the run
is refused rather than trained differently). A refused key set to LLaMA-Factory's own
default (``llamafactory_keys.json``, made by tests/data/llamafactory_keys/make_reference.py)
asks for nothing and passes: ``resume_from_checkpoint: null``, ``use_galore: false``.
No torch here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ftui.i18n import N_

LF_DEFAULTS: dict[str, Any] = json.loads((Path(__file__).with_name("llamafactory_keys.json")).read_text())["defaults"]


def _keys(text: str) -> list[str]:
    return text.split()


# --- Keys that do not change the trained weights: one warning line, then ignored (or honoured as ftui does anyway).
NO_EFFECT = set(_keys("""
    plot_loss overwrite_output_dir ddp_timeout preprocessing_num_workers preprocessing_batch_size overwrite_cache
    cache_dir dataloader_num_workers dataloader_pin_memory dataloader_persistent_workers dataloader_prefetch_factor
    logging_strategy logging_first_step log_on_each_node logging_nan_inf_filter
    include_num_input_tokens_seen include_effective_tokens_per_second log_level log_level_replica disable_tqdm
    logging_dir save_only_model save_on_each_node enable_jit_checkpoint skip_memory_metrics debug
    local_rank ddp_find_unused_parameters ddp_bucket_cap_mb ddp_broadcast_buffers ddp_static_graph ddp_backend
    print_param_status low_cpu_mem_usage use_fast_tokenizer data_shared_file_system remove_unused_columns label_names
    length_column_name project trackio_space_id trackio_bucket_id trackio_static_space_id enable_torch_profiler
    profiler_output_dir profiler_wait_steps profiler_warmup_steps profiler_active_steps profiler_repeat
    profiler_record_shapes profiler_profile_memory profiler_with_stack profile_modules torch_empty_cache_steps
    use_cache use_kv_cache eval_do_concat_batches eval_use_gather_object eval_accumulation_steps
    prediction_loss_only include_for_metrics batch_eval_metrics eval_on_start eval_delay eval_strategy do_eval
    do_predict compute_accuracy predict_with_generate generation_max_length generation_num_beams generation_config
    eval_num_beams bf16_full_eval fp16_full_eval sortish_sampler do_sample temperature top_p top_k num_beams
    max_length max_new_tokens repetition_penalty length_penalty skip_special_tokens export_dir export_size export_device export_quantization_bit
    export_quantization_dataset export_quantization_nsamples export_quantization_maxlen export_legacy_format
    export_hub_model_id hub_token hf_hub_token ms_hub_token om_hub_token hub_private_repo hub_model_id hub_strategy
    hub_always_push hub_revision metric_for_best_model greater_is_better
    restore_callback_states_from_checkpoint full_determinism master_addr master_port
    use_reentrant_gc gradient_checkpointing_kwargs disable_gradient_checkpointing
    torch_compile_backend torch_compile_mode use_liger_kernel liger_kernel_config
    quantization_device_map ignore_pad_token_for_loss buffer_size offload_folder use_unsloth_gc
    module_dropout oft_rank oft_block_size oft_target
    galore_target galore_rank galore_update_interval galore_scale galore_proj_type galore_layerwise
    apollo_target apollo_rank apollo_update_interval apollo_scale apollo_proj apollo_proj_type apollo_scale_type
    apollo_layerwise apollo_scale_front badam_mode badam_start_block badam_switch_mode badam_switch_interval
    badam_update_ratio badam_mask_mode badam_verbose asft_alpha eaft_alpha hyper_parallel_args
    kt_weight_path kt_expert_checkpoint_path kt_use_lora_experts kt_lora_expert_num kt_lora_expert_intermediate_size
    use_swanlab swanlab_project swanlab_workspace swanlab_run_name swanlab_mode swanlab_api_key swanlab_logdir
    swanlab_lark_webhook_url swanlab_lark_secret fp8_backend fp8_enable_fsdp_float8_all_gather pissa_convert
    report_to
"""))

# --- Keys that change the result and that ftui does not do: refused (exit 2, a form error), each with why.
_REFUSED_GROUPS: list[tuple[str, str]] = [
    ("ray_num_workers ray_init_kwargs",
     N_("ftui does not run on Ray; use engine ddp / fsdp / zero* with nproc_per_node and nnodes")),
    ("use_galore use_apollo use_badam use_adam_mini use_muon use_llama_pro use_mca use_hyper_parallel use_kt use_unsloth "
     "use_v1_kernels use_dft_loss use_asft_loss use_eaft_loss mixture_of_depths shift_attn upcast_layernorm "
     "upcast_lmhead_output fp8",
     N_("ftui does not implement this training method or numeric variant; remove the key (or set it false)")),
    ("adapter_name_or_path adapter_folder create_new_adapter",
     N_("ftui starts LoRA adapters fresh; continuing someone else's adapter is not supported (merge it into the base first)")),
    ("resize_vocab add_tokens add_special_tokens new_special_tokens_config init_special_tokens split_special_tokens",
     N_("ftui trains with the tokenizer's vocabulary as it is; add the tokens to the tokenizer (and resize the model) beforehand")),
    ("model_revision", N_("ftui loads the model folder or hub name as given; download that revision to a folder and point model_name_or_path at it")),
    ("quantization_method", N_("ftui quantizes with bitsandbytes only (QLoRA: quantization_bit 4 or 8); GPTQ/AWQ/AQLM/HQQ/EETQ models are not supported")),
    ("rope_scaling", N_("set rope scaling in the model's config.json instead (ftui reads it from there)")),
    ("moe_aux_loss_coef", N_("ftui does not add a MoE router loss coefficient; remove the key")),
    ("train_from_scratch", N_("use model_init: random (ftui's name for training from random weights)")),
    ("freeze_trainable_modules freeze_extra_modules",
     N_("ftui's freeze trains the last freeze_trainable_layers decoder layers whole; other module choices are not supported")),
    ("streaming", N_("ftui reads every record before training (it needs the count for the schedule); turn streaming off")),
    ("preserve_thinking", N_("ftui does not keep earlier turns' thinking blocks; remove the key")),
    ("eval_on_each_dataset", N_("ftui reports one eval loss over the whole eval set; remove the key")),
    ("disable_shuffling train_sampling_strategy", N_("ftui always shuffles with its resumable seeded sampler")),
    ("early_stopping_steps load_best_model_at_end", N_("ftui trains to max_steps / num_train_epochs and keeps every checkpoint (save_total_limit); pick one with ftui chat --checkpoint")),
    ("lr_scheduler_kwargs", N_("ftui's schedulers take no extra arguments; use lr_scheduler_type, warmup_ratio / warmup_steps")),
    ("optim_args optim_target_modules", N_("ftui's optimizers take no extra arguments; use optim, adam_beta1/2, adam_epsilon, weight_decay")),
    ("label_smoothing_factor", N_("ftui's loss has no label smoothing")),
    ("ignore_data_skip", N_("ftui resumes the data exactly where the checkpoint left it; a resume that starts the data over is not supported")),
    ("average_tokens_across_devices", N_("ftui always averages the loss over every rank's tokens (LLaMA-Factory's default, true)")),
    ("auto_find_batch_size", N_("set per_device_train_batch_size yourself (ftui plan tells what fits)")),
    ("use_cpu", N_("use device: cpu")),
    ("fsdp fsdp_config accelerator_config parallelism_config", N_("pick ftui's engine instead (engine: fsdp, fsdp_offload, zero0-3 ...; ftui presets lists them)")),
    ("push_to_hub", N_("ftui does not upload; upload the run's final/ folder yourself")),
    ("pref_bco_weight", N_("ftui's DPO has no BCO term (pref_bco_weight); remove the key")),
    ("ld_alpha", N_("ftui's DPO has no length desensitisation (LD-DPO, ld_alpha); remove the key")),
    ("ref_model ref_model_adapters ref_model_quantization_bit",
     N_("ftui's reference model is the run's own starting point (the base with the adapter off for LoRA, a frozen copy "
     "for full and freeze); a separate reference model is not supported")),
    ("media_dir", N_("ftui reads a record's media relative to dataset_dir (LLaMA-Factory's default for media_dir) or from "
                     "absolute paths; move the files under dataset_dir, or write absolute paths in the records")),
    ("tool_format default_system enable_thinking train_on_prompt mask_history",
     N_("ftui does not implement this key of LLaMA-Factory's templates yet")),
    ("reward_model_adapters reward_model_quantization_bit",
     N_("stage ppo's reward_model is an ftui rm run's directory, loaded as that run trained it (its adapter merged, "
        "not quantized); remove the key")),
]
REFUSED: dict[str, str] = {key: why for keys, why in _REFUSED_GROUPS for key in keys.split()}

# stage names LLaMA-Factory has and ftui does not (yet): the message says so instead of pydantic's list
STAGE_REFUSED: dict[str, str] = {}


def asks_for_something(key: str, value: Any) -> bool:
    """False where the value is LLaMA-Factory's own default or an empty / off value: the key
    asks for nothing and can be ignored."""
    if value is None or value is False or value == "" or value == [] or value == {}:
        return False
    return key not in LF_DEFAULTS or value != LF_DEFAULTS[key]


def classify(key: str, value: Any) -> str:
    """"refused", "no-effect" or "unknown" (neither ftui's nor LLaMA-Factory's: a typo, or
    another tool's key) for a key that is not a RunConfig field."""
    if key in REFUSED and asks_for_something(key, value):
        return "refused"
    if key in REFUSED or key in NO_EFFECT:
        return "no-effect"
    return "unknown"
