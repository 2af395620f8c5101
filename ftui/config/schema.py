"""RunConfig: every setting a run needs, with LLaMA-Factory's key names where one exists.

A LLaMA-Factory SFT YAML loads as it is: the keys ftui knows are validated, the keys it does
not support are kept (so that saving the form writes them back). This module is the schema
alone: what each field may hold. What fields must agree on is ftui.config.rules; what the
machine and the files must have, ftui.config.preflight. No torch here.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Literal, get_args

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from ftui.i18n import N_, _
from ftui.machine.gpu_picks import gpus_as_text
from ftui.presets.choices import ENGINES, PREF_LOSSES, SCHEDULERS
from ftui.presets.infer_backends import LF_INFER_BACKENDS, LF_INFER_DTYPES
from ftui.presets.engine_presets import EngineSpec, engine_spec, read_user_deepspeed, spec_from
from ftui.presets.lf_keys import STAGE_REFUSED
from ftui.rundir.paths import default_runs_root
from ftui.stages import find as find_stage, stage_names


# optim values ftui builds (LLaMA-Factory / transformers' names); the bitsandbytes ones need it and a CUDA GPU
TORCH_OPTIMIZERS = ("adamw_torch", "adamw_torch_fused")
BNB_OPTIMIZERS = ("adamw_bnb_8bit", "adamw_8bit", "paged_adamw_8bit", "paged_adamw_32bit", "paged_adamw")
OPTIMIZERS = TORCH_OPTIMIZERS + BNB_OPTIMIZERS


def comma_text(value: Any) -> Any:
    """A YAML list of names (lora_target: [q_proj, v_proj]) as LLaMA-Factory's comma text."""
    if isinstance(value, (list, tuple)) and all(isinstance(v, (str, int, float)) and not isinstance(v, bool) for v in value):
        return ",".join(str(v).strip() for v in value)
    return value


def comma_items(text: str | None) -> list[str]:
    return [t.strip() for t in (text or "").split(",") if t.strip()]


def _numeric_field(annotation: Any) -> bool:
    """int, float or an Optional of one (not bool, which is a subclass of int)."""
    kinds = set(get_args(annotation)) or {annotation}
    return bool(kinds & {int, float}) and bool not in kinds


class RunConfig(BaseModel):
    """A fine-tuning run. Field names follow LLaMA-Factory / transformers' TrainingArguments."""

    # allow_inf_nan off: learning_rate: .nan would pass gt/le checks in no sensible way
    model_config = ConfigDict(extra="allow", protected_namespaces=(), allow_inf_nan=False)

    # --- Model
    model_name_or_path: str = Field(min_length=1, description=N_("a local model directory or a hub name"))
    model_init: Literal["pretrained", "random"] = Field(
        "pretrained", description=N_("'random' builds the model from its config with random weights")
    )
    trust_remote_code: bool = False
    template: str | None = Field(None, description=N_("a built-in chat template name (LLaMA-Factory's); empty: the tokenizer's own"))
    # --- How conversations are encoded (LLaMA-Factory's keys; ftui.data.conversation)
    tool_format: str | None = Field(None, description=N_("how tools and function calls are written (default, qwen, qwen3_5, llama3, mistral, glm4); empty: the template's"))
    train_on_prompt: bool = Field(False, description=N_("learn the prompts too, not only the answers"))
    mask_history: bool = Field(False, description=N_("learn only the last answer of a conversation (and keep the last turns first when cutting)"))
    default_system: str | None = Field(None, description=N_("the system prompt for records without one, instead of the template's"))
    enable_thinking: bool = Field(True, description=N_("reasoning templates (qwen3, deepseekr1, ...): learn the thinking blocks; false: strip them and put an empty one in the prompt"))
    # --- Vision-language models (LLaMA-Factory's keys and defaults; ftui.data.media, ftui.data.media_tokens)
    image_max_pixels: int = Field(768 * 768, gt=0, description=N_("images above this many pixels are scaled down (aspect kept) before the image processor"))
    image_min_pixels: int = Field(32 * 32, gt=0, description=N_("images below this many pixels are scaled up (aspect kept) before the image processor"))
    image_do_pan_and_scan: bool = Field(False, description=N_("Gemma 3's pan and scan of wide images (not supported yet: refused)"))
    crop_to_patches: bool = Field(False, description=N_("InternVL's cropping of images into patches (not supported yet: refused)"))
    video_max_pixels: int = Field(256 * 256, gt=0, description=N_("video frames above this many pixels are scaled down"))
    video_min_pixels: int = Field(16 * 16, gt=0, description=N_("video frames below this many pixels are scaled up"))
    video_fps: float = Field(2.0, gt=0.0, description=N_("frames sampled per second of video"))
    video_maxlen: int = Field(128, ge=1, description=N_("the most frames sampled from one video"))
    use_audio_in_video: bool = Field(False, description=N_("read a video's sound track too (Qwen2.5-Omni only; refused: ftui trains no Omni model)"))
    audio_sampling_rate: int = Field(16000, ge=1, description=N_("the rate audio is resampled to before the feature extractor (Qwen2-Audio's: 16000)"))
    freeze_vision_tower: bool = Field(True, description=N_("vision-language models: leave the vision encoder untrained"))
    freeze_multi_modal_projector: bool = Field(True, description=N_("vision-language models: leave the projector between the vision encoder and the language model untrained"))
    freeze_language_model: bool = Field(False, description=N_("vision-language models: leave the language model untrained"))
    # --- Method
    stage: str = Field("sft", description=N_("sft: supervised fine-tuning on conversations; pt: pre-training on raw text (every token carries loss); dpo, kto: preference training; rm: a reward model; grpo, ppo: reinforcement learning from rewards"))  # one of ftui.stages
    do_train: bool = True
    finetuning_type: Literal["full", "lora", "freeze"] = Field(
        "lora", description=N_("QLoRA is finetuning_type lora with quantization_bit 4")
    )
    quantization_bit: Literal[4, 8] | None = Field(None, description=N_("4 or 8 with finetuning_type lora: QLoRA"))
    lora_rank: int = Field(8, ge=1, le=4096)
    lora_alpha: int | None = Field(None, ge=1, description=N_("default: twice lora_rank"))
    lora_dropout: float = Field(0.0, ge=0.0, lt=1.0)
    lora_target: str = Field("all", description=N_("'all' linear layers, or module names separated by commas"))
    freeze_trainable_layers: int = Field(2, ge=1, description=N_("how many of the last decoder layers train"))
    gradient_checkpointing: bool = False
    # --- Speed
    torch_compile: bool = Field(False, description=N_("compile each decoder layer with torch.compile (the first steps are slower)"))
    chunked_loss: bool = Field(True, description=N_("compute the loss from the last hidden states in chunks, never the full logits (much less memory with large vocabularies); false: full logits"))
    tf32: bool = Field(True, description=N_("fp32 runs on CUDA use TF32 tensor cores for matrix products (Ampere and later); false: true fp32 arithmetic, several times slower"))
    enable_liger_kernel: bool = Field(False, description=N_("Liger's Triton kernels (RMSNorm, SwiGLU, RoPE, and its fused linear cross-entropy for the chunked loss); needs liger-kernel and a CUDA GPU"))
    flash_attn: Literal["auto", "sdpa", "fa2", "disabled", "fa3"] = Field(
        "auto", description=N_("attention kernel: auto: PyTorch's SDPA (with a mask over packed or padded rows), eager attention for a model "
                               "SDPA cannot compute (Gemma 2's soft-capping); sdpa: SDPA only; fa2: FlashAttention-2 "
                               "over each example alone (torch's built-in kernel, torch >= 2.10, an Ampere or newer GPU, bf16 or fp16); disabled: "
                               "plain eager attention"))
    # --- Data
    dataset: str = Field(min_length=1, description=N_("dataset names from dataset_info.json or file paths, comma separated"))
    dataset_dir: str = "data"
    cutoff_len: int = Field(2048, ge=8, le=1_048_576)
    packing: bool | None = Field(None, description=N_("pack examples into full rows; empty: the stage's default (pt packs raw text into cutoff_len blocks, sft does not)"))
    neat_packing: bool = Field(False, description=N_("LLaMA-Factory's packing without attention between examples, which is what ftui's packing "
                                                     "does: the same as packing: true (stage sft only)"))
    padding_free: bool | None = Field(None, description=N_("lay each micro batch's examples end to end in one row, each attending to itself "
                                                           "alone: the same losses without computing padding; empty: on where that is exact "
                                                           "and fast (stages sft and pt, decoder-only text models with rotary positions, on the "
                                                           "CPU or with flash_attn fa2); false: padded rows"))
    max_samples: int | None = Field(None, ge=1)
    val_size: float = Field(0.0, ge=0.0, lt=1.0)
    # --- Training
    per_device_train_batch_size: int = Field(1, ge=1, le=65536)
    per_device_eval_batch_size: int = Field(1, ge=1, le=65536)
    gradient_accumulation_steps: int = Field(1, ge=1, le=65536)
    learning_rate: float = Field(1e-4, gt=0.0, le=10.0)
    num_train_epochs: float = Field(3.0, gt=0.0)
    max_steps: int = Field(-1, ge=-1, description=N_("-1: as many as num_train_epochs gives"))
    lr_scheduler_type: Literal[SCHEDULERS] = "cosine"  # type: ignore[valid-type]
    warmup_ratio: float = Field(0.0, ge=0.0, le=1.0)
    warmup_steps: int = Field(0, ge=0)
    weight_decay: float = Field(0.0, ge=0.0)
    max_grad_norm: float = Field(1.0, ge=0.0, description=N_("0 turns clipping off"))
    adam_beta1: float = Field(0.9, ge=0.0, lt=1.0)
    adam_beta2: float = Field(0.999, ge=0.0, lt=1.0)
    adam_epsilon: float = Field(1e-8, gt=0.0)
    bf16: bool = False
    fp16: bool = False
    pure_bf16: bool = Field(False, description=N_("train the weights themselves in bf16, without autocast or fp32 master weights (LLaMA-Factory's "
                                                  "compute type pure_bf16): about half the memory of weights, gradients and optimizer states and faster "
                                                  "steps, but an update smaller than bf16 can hold is lost; LoRA's adapters stay fp32"))
    logging_steps: int = Field(10, ge=1)
    save_steps: int = Field(500, ge=1, description=N_("with save_strategy steps (the default): a resumable checkpoint every N steps and at the end"))
    save_strategy: Literal["steps", "epoch", "no"] = Field(
        "steps", description=N_("when resumable checkpoints are written: steps (every save_steps and at the end), epoch (every epoch's "
                                "worth of optimizer steps, as the epoch figure counts them, and at the end) or no (none while training: "
                                "a crash loses the run, though a stop still saves one); final/ is written either way"))
    save_total_limit: int | None = Field(None, ge=1, description=N_("keep only the newest N checkpoints; empty: keep all"))
    eval_steps: int | None = Field(None, ge=1, description=N_("default: logging_steps x 10"))
    seed: int = Field(42, ge=0)
    data_seed: int | None = Field(None, ge=0, description=N_("the seed of the data order (each epoch's shuffle); empty: seed"))
    dataloader_drop_last: bool = Field(False, description=N_("drop each epoch's last micro batch when it is smaller than the others"))
    # --- LLaMA-Factory's method, optimizer and data keys (issue 14): each changes the result and is done as it does
    use_dora: bool = Field(False, description=N_("DoRA: LoRA plus a trained magnitude vector per adapted layer (peft use_dora)"))
    use_rslora: bool = Field(False, description=N_("rank-stabilised LoRA: adapters scaled by lora_alpha / sqrt(lora_rank) instead of lora_alpha / lora_rank"))
    pissa_init: bool = Field(False, description=N_("PiSSA: adapters start from the principal singular vectors of each weight (the base keeps the rest); final/ holds the adapter converted to plain LoRA for the original base"))
    pissa_iter: int = Field(16, ge=-1, description=N_("PiSSA's fast-SVD iterations; -1: the exact SVD"))
    loraplus_lr_ratio: float | None = Field(None, gt=0.0, description=N_("LoRA+: the B matrices (and 1-D trainables) learn at learning_rate x this ratio"))
    loraplus_lr_embedding: float = Field(1e-6, gt=0.0, description=N_("LoRA+: the learning rate of LoRA embedding B matrices"))
    additional_target: str | None = Field(None, description=N_("with LoRA: modules (names, comma separated) trained whole and saved with the adapter, e.g. embed_tokens,lm_head"))
    neftune_noise_alpha: float | None = Field(None, ge=0.0, description=N_("NEFTune: uniform noise of size alpha / sqrt(tokens x hidden) added to the embeddings while training"))
    optim: str = Field("adamw_torch_fused", description=N_("the optimizer: adamw_torch, adamw_torch_fused, adamw_bnb_8bit, adamw_8bit, paged_adamw_8bit, "
                                                            "paged_adamw_32bit, paged_adamw"))
    double_quantization: bool = Field(True, description=N_("QLoRA 4-bit: quantize the quantization constants too (bnb_4bit_use_double_quant)"))
    quantization_type: Literal["nf4", "fp4"] = Field("nf4", description=N_("QLoRA 4-bit data type"))
    eval_dataset: str | None = Field(None, description=N_("datasets evaluated instead of a val_size share (names or files, comma separated)"))
    mix_strategy: Literal["concat", "interleave_under", "interleave_over", "interleave_once"] = Field(
        "concat", description=N_("how several datasets mix: concat, or interleaved until the first runs out (under), all ran out (over) or each was used once (once)"))
    interleave_probs: str | None = Field(None, description=N_("with interleave_*: one sampling probability per dataset, comma separated"))
    tokenized_path: str | None = Field(None, description=N_("a folder for the encoded data: written when missing, read (and the datasets skipped) when present"))
    resume_from_checkpoint: str | None = Field(None, description=N_("an ftui checkpoint (RUN/checkpoints/step-N) or run directory: that run continues from it (as ftui train --resume)"))
    # --- Preference stages (dpo, kto; LLaMA-Factory's keys)
    pref_beta: float = Field(0.1, gt=0.0, description=N_("dpo/kto: beta, how far the policy may move from the reference (higher: less)"))
    pref_loss: Literal[PREF_LOSSES] = Field("sigmoid", description=N_("dpo: sigmoid (DPO), hinge, ipo, orpo or simpo (the last two need no reference model)"))  # type: ignore[valid-type]
    pref_ftx: float = Field(0.0, ge=0.0, description=N_("dpo/kto: weight of an SFT term on the chosen answer added to the preference loss"))
    dpo_label_smoothing: float = Field(0.0, ge=0.0, le=0.5, description=N_("dpo sigmoid: robust DPO's label smoothing (0 to 0.5)"))
    simpo_gamma: float = Field(0.5, description=N_("dpo simpo: the target reward margin"))
    kto_chosen_weight: float = Field(1.0, gt=0.0, description=N_("kto: weight of the desirable examples' loss"))
    kto_rejected_weight: float = Field(1.0, gt=0.0, description=N_("kto: weight of the undesirable examples' loss"))
    # --- Inference (LLaMA-Factory's keys and defaults): how chat, predict, eval and serve load and generate
    infer_backend: Literal[LF_INFER_BACKENDS] = Field(  # type: ignore[valid-type]
        "huggingface", description=N_("the engine that generates answers: huggingface (transformers); vllm and sglang are "
                                      "refused by name (ftui does not run them on this version)"))
    infer_dtype: Literal[LF_INFER_DTYPES] = Field(  # type: ignore[valid-type]
        "auto", description=N_("the weights' type when chat, predict, eval and serve load the model: auto (bf16 on a GPU that "
                               "computes it natively, else fp32), float16, bfloat16 or float32"))
    vllm_maxlen: int = Field(4096, description=N_("vLLM's longest prompt + answer (used with infer_backend vllm only)"))
    vllm_gpu_util: float = Field(0.7, description=N_("vLLM's share of GPU memory (used with infer_backend vllm only)"))
    vllm_enforce_eager: bool = Field(False, description=N_("vLLM without CUDA graphs (used with infer_backend vllm only)"))
    vllm_max_lora_rank: int = Field(32, description=N_("vLLM's largest LoRA rank (used with infer_backend vllm only)"))
    vllm_config: dict[str, Any] | str | None = Field(None, description=N_("more vLLM engine arguments, a mapping or JSON text (used with infer_backend vllm only)"))
    sglang_maxlen: int = Field(4096, description=N_("SGLang's longest prompt + answer (used with infer_backend sglang only)"))
    sglang_mem_fraction: float = Field(0.7, description=N_("SGLang's share of GPU memory (used with infer_backend sglang only)"))
    sglang_tp_size: int = Field(-1, description=N_("SGLang's tensor parallel size, -1: every GPU (used with infer_backend sglang only)"))
    sglang_config: dict[str, Any] | str | None = Field(None, description=N_("more SGLang engine arguments, a mapping or JSON text (used with infer_backend sglang only)"))
    sglang_lora_backend: Literal["triton", "flashinfer"] = Field("triton", description=N_("SGLang's LoRA kernels (used with infer_backend sglang only)"))
    # --- Output
    output_dir: str = Field(default_factory=default_runs_root, description=N_("the runs root: each run gets a directory in it"))
    run_name: str | None = None
    # --- Engine (ftui's own)
    engine: Literal[ENGINES] = "single"  # type: ignore[valid-type]
    deepspeed: str | None = Field(None, description=N_("path to your own DeepSpeed JSON (as in LLaMA-Factory); overrides the zero* preset's file"))
    nproc_per_node: int = Field(1, ge=1, le=1024)
    nnodes: int = Field(1, ge=1, le=4096)
    node_rank: int = Field(0, ge=0)
    rdzv_endpoint: str | None = Field(None, description=N_("host:port where the nodes meet (multi-node)"))
    device: Literal["auto", "cuda", "cpu"] = "auto"
    # --- Launcher (ftui's own): where the job runs. slurm: ftui writes RUN/slurm.sh, submits it with sbatch; nnodes is
    # --nodes, nproc_per_node the ranks per node (docs/clusters.md)
    launcher: Literal["local", "slurm"] = Field("local", description=N_("local: this machine (and the nodes you start by hand); "
                                                "slurm: submit the run to a Slurm cluster with sbatch"))
    slurm_partition: str | None = Field(None, description=N_("slurm: the partition (sbatch --partition); empty: the cluster's default"))
    slurm_account: str | None = Field(None, description=N_("slurm: the account charged (sbatch --account)"))
    slurm_qos: str | None = Field(None, description=N_("slurm: the quality of service (sbatch --qos)"))
    slurm_time: str | None = Field(None, description=N_("slurm: the time limit, in Slurm's format (MM, HH:MM:SS, D-HH:MM); "
                                                        "before it the run saves a checkpoint and requeues itself"))
    slurm_gpus_per_node: int | None = Field(None, ge=0, description=N_("slurm: GPUs per node (--gpus-per-node); empty: "
                                                                       "nproc_per_node, none when device is cpu"))
    slurm_cpus_per_task: int | None = Field(None, ge=1, description=N_("slurm: CPUs for each node's task (--cpus-per-task)"))
    slurm_mem_per_task: str | None = Field(None, description=N_("slurm: memory for each node's task (--mem, e.g. 64G)"))
    slurm_constraint: str | None = Field(None, description=N_("slurm: node features required (--constraint)"))
    slurm_sbatch_lines: list[str] = Field(default_factory=list, description=N_("slurm: more #SBATCH lines, written into the script as given"))
    slurm_warn_s: int = Field(120, ge=0, description=N_("slurm: seconds before the time limit when the run saves a checkpoint and "
                                                        "requeues itself (--signal=B:USR1@S; 0: no warning)"))
    slurm_requeue: bool = Field(True, description=N_("slurm: requeue the job after a time-limit warning or a preemption and "
                                                     "resume from the newest checkpoint (--requeue)"))
    gpus: str | None = Field(None, description=N_("the GPUs the run uses, as nvidia-smi numbers them (0,1) or GPU-/MIG- UUID prefixes: "
                             "its processes' CUDA_VISIBLE_DEVICES; empty: those CUDA_VISIBLE_DEVICES leaves (unset: all)"))
    # --- Reporting
    report_to: str | list[str] | None = Field("none", description=N_("mirror the step and eval figures besides events.jsonl: none, "
                                             "tensorboard (event files in the run directory's tensorboard/), wandb (needs "
                                             "pip install wandb; WANDB_MODE=offline needs no network), all, or several separated by commas"))
    # --- Faults (ftui's own)
    nonfinite_loss_limit: int = Field(5, ge=1, description=N_("stop the run after this many steps in a row with a NaN/inf loss"))
    hang_timeout: int = Field(1800, ge=0, description=N_("end the job, naming the rank, when no rank finishes a step for this many seconds (0: never)"))
    stop_timeout: int = Field(600, ge=5, description=N_("seconds a graceful stop may take (finish the step, save) before the ranks are killed"))

    @model_validator(mode="before")
    @classmethod
    def _neat_packing_packs(cls, data: Any) -> Any:
        """LLaMA-Factory's neat_packing turns packing on with examples kept apart, which is how
        ftui packs an sft run; another stage keeps the key to be refused (stage_problems)."""
        stage = find_stage(data.get("stage", "sft")) if isinstance(data, dict) else None
        if stage is not None and stage.neat_packing and data.get("neat_packing") is True:
            data = {**data, "packing": True}
        return data

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_for_a_number(cls, value: Any, info: Any) -> Any:
        """pydantic's lax mode reads true as 1 for an int or float field (max_steps: true would
        train one step); a number field takes numbers only."""
        if isinstance(value, bool) and _numeric_field(cls.model_fields[info.field_name].annotation):
            raise PydanticCustomError("bool_for_number", "Input should be a number, not true or false")
        return value

    @field_validator("stage", mode="before")
    @classmethod
    def _stage_known(cls, value: Any) -> Any:
        """A stage some module of ftui.stages describes (read when validating: a stage a plugin
        added is one); LLaMA-Factory's stages ftui lacks are refused saying so."""
        if isinstance(value, str) and value in STAGE_REFUSED:
            raise ValueError(_("{reason}; ftui trains {stages}").format(reason=_(STAGE_REFUSED[value]), stages=", ".join(stage_names())))
        if find_stage(value) is None:  # pydantic's own wording for a value not among the choices
            names = [repr(n) for n in stage_names()]
            raise PydanticCustomError("literal_error", "Input should be {expected}",
                                      {"expected": " or ".join(filter(None, [", ".join(names[:-1]), names[-1]]))})
        return value

    @field_validator("lora_target", "additional_target", "eval_dataset", "interleave_probs", "dataset", mode="before")
    @classmethod
    def _comma_text(cls, value: Any) -> Any:
        return comma_text(value)

    @field_validator("vllm_config", "sglang_config", mode="before")
    @classmethod
    def _engine_config_json(cls, value: Any) -> Any:
        """LLaMA-Factory reads JSON text that starts with '{' as the mapping it writes out; text
        that is not JSON is refused as it refuses it."""
        if isinstance(value, str) and value.startswith("{"):
            try:
                value = json.loads(value)
            except ValueError as err:
                raise ValueError(_("not JSON: {error}; write a mapping, e.g. '{{\"max_num_seqs\": 64}}'").format(error=err)) from None
            if not isinstance(value, dict):
                raise ValueError(_("expected a mapping of engine arguments"))
        return value

    @field_validator("resume_from_checkpoint", mode="before")
    @classmethod
    def _resume_off(cls, value: Any) -> Any:
        return None if value is False else value

    @field_validator("save_strategy", mode="before")
    @classmethod
    def _save_strategy_no(cls, value: Any) -> Any:
        """YAML reads an unquoted ``save_strategy: no`` as false: it means "no" (HF's value)."""
        return "no" if value is False else value

    @field_validator("gpus", mode="before")
    @classmethod
    def _gpus_as_text(cls, value: Any) -> Any:
        return gpus_as_text(value)

    @property
    def precision(self) -> str:
        """The compute type: bf16 (autocast, or pure with ``pure_bf16``), fp16 or fp32."""
        return "bf16" if self.bf16 or self.pure_bf16 else "fp16" if self.fp16 else "fp32"

    @property
    def precision_label(self) -> str:
        """The precision as events and listings show it (LLaMA-Factory's compute-type names)."""
        return "pure_bf16" if self.pure_bf16 else self.precision

    @property
    def method(self) -> str:
        if self.finetuning_type == "lora" and self.quantization_bit:
            return "qlora"
        return self.finetuning_type

    @property
    def engine_name(self) -> str:
        """The engine as events and listings show it: the preset, or the user's DeepSpeed file."""
        if self.deepspeed:
            return f"deepspeed:{Path(self.deepspeed).name}"
        return self.engine

    @property
    def engine_spec(self) -> EngineSpec:
        """What the engine is (backend, strategy, ZeRO stage, offload), from the preset's file
        or the user's DeepSpeed JSON; raises ValueError when that file cannot be read."""
        if self.deepspeed:
            return spec_from(self.engine_name, read_user_deepspeed(self.deepspeed))
        return engine_spec(self.engine)

    @property
    def uses_deepspeed(self) -> bool:
        return bool(self.deepspeed) or engine_spec(self.engine).deepspeed

    @property
    def world_size(self) -> int:
        return self.nproc_per_node * self.nnodes

    def to_dict(self, include_unsupported: bool = True) -> dict[str, Any]:
        """Its keys; ``include_unsupported=False`` leaves out the keys ftui has no field for,
        except its stage's own options (a stage's keys RunConfig has no field for: grpo's),
        which change what is trained."""
        data = self.model_dump(exclude=set(self.model_extra or {}))
        stage = find_stage(self.stage)
        own = set(stage.option_keys) if stage is not None else set()
        data.update({k: v for k, v in (self.model_extra or {}).items() if include_unsupported or k in own})
        return data

    def to_yaml(self, include_unsupported: bool = True) -> str:
        return yaml.safe_dump(self.to_dict(include_unsupported), sort_keys=False, allow_unicode=True)

    def save(self, path: str | os.PathLike[str], include_unsupported: bool = True) -> None:
        Path(path).write_text(self.to_yaml(include_unsupported), encoding="utf-8")


def config_defaults() -> dict[str, Any]:
    """Every field's default (required fields left out): what an empty form starts from."""
    return {k: f.get_default(call_default_factory=True) for k, f in RunConfig.model_fields.items() if not f.is_required()}
