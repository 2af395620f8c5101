"""The rules a config must keep that need nothing but the config: fields that must agree with
each other, LLaMA-Factory's rules for its keys, keys refused by name and keys nobody knows.

They decide the same on every machine, so they are checked wherever a config is checked for a
new run (ftui.config.preflight); a run's own saved config is read with its schema alone.
"""

from __future__ import annotations

import difflib
import math
import re

from pydantic import ValidationError

from ftui.config.media_checks import VISION_TEMPLATES
from ftui.presets.vision_families import FAMILY_NAMES, IMAGE_TEMPLATES
from ftui.config.problems import FieldProblem, pydantic_message
from ftui.config.schema import BNB_OPTIMIZERS, OPTIMIZERS, TORCH_OPTIMIZERS, RunConfig, comma_items
from ftui.data.conversation import TOOL_FORMATS
from ftui.i18n import N_, _
from ftui.presets.engine_presets import NEEDS_SEVERAL, engine_spec
from ftui.presets.infer_backends import NOT_RUN, rollout_refusal
from ftui.presets.lf_keys import LF_DEFAULTS, NO_EFFECT, REFUSED, classify
from ftui.presets.templates import MULTIMODAL_TEMPLATES, TEMPLATES
from ftui.presets.trl_keys import TRL_REFUSED
from ftui.safety.bounded_input import short_repr
from ftui.stages import PACKING_NEVER, find as find_stage, option_keys as stage_option_keys


def field_rules(cfg: RunConfig) -> list[FieldProblem]:
    """Precision, template and encoding, lora_target's form, max_steps, quantization's method
    and the single engine's one process."""
    out: list[FieldProblem] = []
    if cfg.bf16 and cfg.fp16:
        out.append(FieldProblem("fp16", True, _("bf16 and fp16 are both on; choose one precision")))
    if cfg.pure_bf16 and cfg.fp16:
        out.append(FieldProblem("fp16", True, _("pure_bf16 trains in bf16 and fp16 is on too; choose one precision")))
    if cfg.template in MULTIMODAL_TEMPLATES and cfg.template not in VISION_TEMPLATES:
        out.append(FieldProblem("template", cfg.template, _("LLaMA-Factory's template for a multimodal (vision, video or audio) "
                                                            "model family ftui does not train yet: ftui trains text-only language "
                                                            "models and {families} (templates {templates})").format(
            families=FAMILY_NAMES, templates=", ".join(IMAGE_TEMPLATES))))
    elif cfg.template is not None and cfg.template not in TEMPLATES and cfg.template not in VISION_TEMPLATES:
        out.append(FieldProblem("template", cfg.template, _("unknown template; allowed: {templates} or empty for the tokenizer's own").format(templates=", ".join(TEMPLATES))))
    out += encoding_problems(cfg)
    out += media_key_problems(cfg)
    if cfg.lora_target != "all" and not re.fullmatch(r"[\w.]+(\s*,\s*[\w.]+)*", cfg.lora_target):
        out.append(FieldProblem("lora_target", cfg.lora_target, _("use 'all' or module names separated by commas, e.g. q_proj,v_proj")))
    if cfg.max_steps == 0:
        out.append(FieldProblem("max_steps", 0, _("use -1 (derive from num_train_epochs) or a positive number")))
    if cfg.quantization_bit is not None and cfg.finetuning_type != "lora":
        out.append(FieldProblem("quantization_bit", cfg.quantization_bit, _("quantization (QLoRA) needs finetuning_type lora")))
    if engine_spec(cfg.engine).strategy == "single" and not cfg.deepspeed and cfg.world_size > 1:
        out.append(FieldProblem("nproc_per_node" if cfg.nproc_per_node > 1 else "nnodes", cfg.nproc_per_node if cfg.nproc_per_node > 1 else cfg.nnodes, _("the single engine runs one process; choose engine ddp for several")))
    return out


# Image keys LLaMA-Factory reads for one family only, which ftui does not implement yet: set, they
# would change that family's images, so they are refused rather than ignored; so is
# use_audio_in_video, which only an Omni model reads (ftui trains videos without their sound and
# Qwen2-Audio on audio files; audio_sampling_rate is Qwen2-Audio's, ftui.config.audio_checks).
FAMILY_IMAGE_KEYS = {
    "image_do_pan_and_scan": N_("image_do_pan_and_scan (Gemma 3's crops of wide images) is not supported yet: ftui trains Gemma 3 on whole images; remove it (or set it false)"),
    "use_audio_in_video": N_("use_audio_in_video (a video's sound track) needs an Omni model such as Qwen2.5-Omni, which ftui does not "
                             "train; ftui trains videos without their sound (Qwen2-VL, Qwen2.5-VL, Qwen3-VL): remove it (or set it false)"),
    "crop_to_patches": N_("crop_to_patches (InternVL's tiles of large images) is not supported yet: ftui trains InternVL on whole images; remove it (or set it false)"),
}


def media_key_problems(cfg: RunConfig) -> list[FieldProblem]:
    """The image and video pixel bounds (LLaMA-Factory's rule: the maximum not below the
    minimum) and the keys of families ftui does not train yet."""
    out = [FieldProblem(key, True, _(why)) for key, why in FAMILY_IMAGE_KEYS.items() if getattr(cfg, key)]
    for kind in ("image", "video"):
        low, high = getattr(cfg, f"{kind}_min_pixels"), getattr(cfg, f"{kind}_max_pixels")
        if low > high:
            out.append(FieldProblem(f"{kind}_min_pixels", low, _("{kind}_min_pixels {low} is above {kind}_max_pixels {high}; "
                                                                 "lower it or raise {kind}_max_pixels").format(kind=kind, low=low, high=high)))
    return out


def launch_rules(cfg: RunConfig) -> list[FieldProblem]:
    """torch_compile with DeepSpeed, the nodes' rendezvous and node_rank."""
    out: list[FieldProblem] = []
    if cfg.torch_compile and cfg.uses_deepspeed:
        out.append(FieldProblem("torch_compile", True, _("ftui compiles the layers of the torch engines only (single, ddp, fsdp); turn it off for DeepSpeed")))
    if cfg.nnodes > 1 and not cfg.rdzv_endpoint and cfg.launcher != "slurm":  # Slurm gives the nodes (slurm_rules)
        out.append(FieldProblem("rdzv_endpoint", cfg.rdzv_endpoint, _("several nodes need a rendezvous endpoint host:port")))
    if cfg.rdzv_endpoint and not re.fullmatch(r"[\w.\-\[\]:]+:\d{1,5}", cfg.rdzv_endpoint):
        out.append(FieldProblem("rdzv_endpoint", cfg.rdzv_endpoint, _("expected host:port, e.g. 10.0.0.1:29500")))
    if cfg.node_rank >= cfg.nnodes:
        out.append(FieldProblem("node_rank", cfg.node_rank, _("must be below nnodes ({nnodes})").format(nnodes=cfg.nnodes)))
    elif cfg.node_rank > 0 and cfg.launcher != "slurm":  # every node must write into one run directory (ftui.jobs.launch.join_target)
        out.append(FieldProblem("node_rank", cfg.node_rank, _("a config starts node 0 of a run; the other nodes join that run "
                                                              "with the command node 0 prints (ftui train RUN/config.yaml "
                                                              "--node-rank N), so that every node writes into one run directory")))
    return out


def run_name_rule(cfg: RunConfig) -> list[FieldProblem]:
    """run_name names the run's directory: a plain name."""
    if cfg.run_name is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,80}", cfg.run_name):
        return [FieldProblem("run_name", cfg.run_name, _("letters, digits, '.', '_' and '-' only, starting with a letter or digit, at most 81 characters"))]
    return []


def encoding_problems(cfg: RunConfig) -> list[FieldProblem]:
    """The encoding keys' rules, as LLaMA-Factory enforces them."""
    out = []
    if cfg.tool_format is not None:
        if cfg.tool_format not in TOOL_FORMATS:
            out.append(FieldProblem("tool_format", cfg.tool_format, _("unknown tool format; allowed: {formats}").format(formats=", ".join(TOOL_FORMATS))))
        elif not cfg.template:
            out.append(FieldProblem("tool_format", cfg.tool_format, _("needs a named template (template: qwen, llama3, ...); the tokenizer's own chat template writes tools its own way")))
    if cfg.train_on_prompt and cfg.mask_history:
        out.append(FieldProblem("mask_history", True, _("mask_history and train_on_prompt cannot be combined; choose one")))
    template = TEMPLATES.get(cfg.template or "")
    if cfg.train_on_prompt and template is not None and template.efficient_eos:
        out.append(FieldProblem("train_on_prompt", True, _("template {template} ends an example with one EOS, so it cannot learn prompts; set train_on_prompt false").format(template=cfg.template)))
    return out


def engine_problems(cfg: RunConfig) -> list[FieldProblem]:
    """Engine / method / precision / process-count combinations that cannot work, with an
    alternative in each message."""
    out: list[FieldProblem] = []
    if cfg.engine in NEEDS_SEVERAL and cfg.world_size == 1 and not cfg.deepspeed:
        offload = "fsdp_offload" if engine_spec(cfg.engine).strategy == "fsdp" else "zero3_offload"
        out.append(FieldProblem("engine", cfg.engine, _("{engine} shards over processes and needs nproc_per_node >= 2; with one GPU use single, or {offload} to fit a larger "
                                                            "model").format(engine=cfg.engine, offload=offload)))
    if cfg.method == "qlora" and (cfg.deepspeed or engine_spec(cfg.engine).shards_parameters):
        out.append(FieldProblem("engine", cfg.engine, _("QLoRA's 4/8-bit base cannot be sharded by ftui's engines; use single or ddp, or plain lora with fsdp/zero3")))
    if cfg.method == "qlora" and cfg.model_init == "random":
        out.append(FieldProblem("model_init", cfg.model_init, _("QLoRA quantizes pretrained weights as they load; a random model is never loaded from disk, so use lora (or save "
                                                                      "the random model and point model_name_or_path at it)")))
    if cfg.pure_bf16 and cfg.uses_deepspeed:
        out.append(FieldProblem("pure_bf16", True, _("DeepSpeed keeps fp32 master weights in its optimizer, so it cannot train purely in bf16; use bf16: true "
                                                      "with {engine}, or pure_bf16 with engine single, ddp, fsdp or fsdp_offload").format(engine=cfg.engine_name)))
    if cfg.deepspeed:
        preset = engine_spec(cfg.engine)
        if not preset.deepspeed and preset.strategy != "single":  # a torch engine that is not the default
            out.append(FieldProblem("deepspeed", cfg.deepspeed, _("a DeepSpeed config runs the DeepSpeed engine, but engine is {engine}; leave engine at single (the file decides) or "
                                                                    "pick a zero* preset").format(engine=cfg.engine)))
    return out


def known_key_names() -> set[str]:
    """Every key a config may hold: ftui's fields and every key LLaMA-Factory 0.9.5 reads."""
    return set(RunConfig.model_fields) | set(LF_DEFAULTS) | NO_EFFECT | set(REFUSED)


def unknown_key_problems(cfg: RunConfig) -> list[FieldProblem]:
    """Keys neither ftui nor LLaMA-Factory knows: refused, as LLaMA-Factory's argument parser
    refuses them, because a misspelt key (``learnig_rate``) was meant to change the result and
    training without it would quietly train something else. The closest known name is offered."""
    out = []
    known: list[str] = []  # every known name, listed once the first unknown key needs them
    for key, value in sorted((cfg.model_extra or {}).items()):
        if classify(key, value) != "unknown" or key in stage_option_keys():  # a stage's own option (another stage's: kept)
            continue
        if key in TRL_REFUSED:  # TRL's GRPOConfig key: what ftui does instead
            out.append(FieldProblem(key, value, _("TRL's key, not implemented by ftui: {reason}").format(
                reason=_(TRL_REFUSED[key]))))
            continue
        known = known or sorted(known_key_names())
        close = difflib.get_close_matches(key, known, n=1, cutoff=0.75)
        if close:
            message = _("unknown key: neither ftui nor LLaMA-Factory has it; did you mean {name}? "
                        "Correct the name or remove the key").format(name=close[0])
        else:
            message = _("unknown key: neither ftui nor LLaMA-Factory has it (another tool's key?); remove it "
                        "(the README's section \"The config\" says which keys ftui reads)")
        out.append(FieldProblem(key if key.strip() else short_repr(key), value, message))  # an empty key is named ''
    return out


def refused_key_problems(cfg: RunConfig) -> list[FieldProblem]:
    """LLaMA-Factory keys that would change the result and that ftui does not do: refused by
    name (ftui.presets.lf_keys), never trained without them."""
    return [FieldProblem(key, value, _("not supported: {reason}").format(reason=_(REFUSED[key])))
            for key, value in sorted((cfg.model_extra or {}).items()) if classify(key, value) == "refused"]


LORA_ONLY = ("use_dora", "use_rslora", "pissa_init", "loraplus_lr_ratio", "additional_target")


def method_option_problems(cfg: RunConfig) -> list[FieldProblem]:
    """The LoRA variants, the optimizer and QLoRA's options: where they apply, as LLaMA-Factory rules."""
    out: list[FieldProblem] = []
    if cfg.finetuning_type != "lora":
        for key in LORA_ONLY:
            value = getattr(cfg, key)
            if value not in (None, False):
                out.append(FieldProblem(key, value, _("{key} is only valid with finetuning_type lora (this run is {method})").format(key=key, method=cfg.finetuning_type)))
    if cfg.pissa_init and cfg.method == "qlora":
        out.append(FieldProblem("pissa_init", True, _("PiSSA decomposes full-precision weights; it cannot start from a 4/8-bit base (use lora without quantization_bit)")))
    if cfg.additional_target is not None and not re.fullmatch(r"[\w.]+(\s*,\s*[\w.]+)*", cfg.additional_target):
        out.append(FieldProblem("additional_target", cfg.additional_target, _("module names separated by commas, e.g. embed_tokens,lm_head")))
    if cfg.optim not in OPTIMIZERS:
        out.append(FieldProblem("optim", cfg.optim, _("ftui builds {torch} (and with bitsandbytes on a CUDA GPU {bnb}); other "
                                                      "optimizers are not supported").format(
                                    torch=", ".join(TORCH_OPTIMIZERS), bnb=", ".join(BNB_OPTIMIZERS))))
    elif cfg.optim in BNB_OPTIMIZERS:  # whether bitsandbytes and a GPU are here: ftui.config.machine_checks
        reason = (_("bitsandbytes' optimizers run on CUDA only; use adamw_torch for a CPU run") if cfg.device == "cpu"
                  else _("ftui's sharding engines (fsdp, zero*) build their own optimizer state; use single or ddp")
                  if cfg.deepspeed or engine_spec(cfg.engine).shards_parameters else None)
        if reason:
            out.append(FieldProblem("optim", cfg.optim, _("{optim} is not possible here: {reason}; or use adamw_torch / adamw_torch_fused").format(optim=cfg.optim, reason=reason)))
    return out


def data_option_problems(cfg: RunConfig) -> list[FieldProblem]:
    """eval_dataset and mixing, as LLaMA-Factory rules them (tokenized_path and resume_from_checkpoint
    name files: ftui.config.file_checks)."""
    out: list[FieldProblem] = []
    if cfg.eval_dataset is not None and cfg.val_size:
        out.append(FieldProblem("val_size", cfg.val_size, _("give either eval_dataset or val_size, not both")))
    if cfg.interleave_probs is not None:
        out += _interleave_problems(cfg)
    return out


def stage_problems(cfg: RunConfig) -> list[FieldProblem]:
    """What the config's stage cannot do, from its description (ftui.stages), as LLaMA-Factory's
    processors rule it: neat_packing where the stage has none; packing, train_on_prompt and
    mask_history for a stage whose examples are a prompt with whole answers compared (the
    preference stages); its own options' values that RunConfig has no field for (a new
    stage's), by its options' sub-model; and the stage's own rules."""
    out: list[FieldProblem] = []
    stage = find_stage(cfg.stage)
    if stage is None:  # refused by the field's own validation
        return out
    if cfg.neat_packing and not stage.neat_packing:
        out.append(FieldProblem("neat_packing", True, _("neat_packing packs sft examples without attention between them (as "
                                                        "LLaMA-Factory allows it for stage sft only); remove it for stage {stage}").format(stage=cfg.stage)))
    if cfg.packing and stage.packing == PACKING_NEVER:
        out.append(FieldProblem("packing", True, _("stage {stage} compares whole answers, which packing would join; "
                                                   "set packing false (or empty)").format(stage=cfg.stage)))
    if cfg.padding_free and not stage.padding_free:
        out.append(FieldProblem("padding_free", True, _("stage {stage} reads each row as a whole (a pair of answers or a value per "
                                                        "row), so its rows cannot be laid end to end; set padding_free false (or "
                                                        "empty)").format(stage=cfg.stage)))
    if stage.answers_only:
        for key in ("train_on_prompt", "mask_history"):
            if getattr(cfg, key):
                out.append(FieldProblem(key, True, _("stage {stage} learns from the last answer only, never the prompt or earlier "
                                                     "turns (as LLaMA-Factory's preference processors); remove the key").format(stage=cfg.stage)))
    if stage.planner.generation and cfg.infer_backend in NOT_RUN:  # the rollouts generate as the job backends do
        out.append(FieldProblem("infer_backend", cfg.infer_backend, rollout_refusal(cfg.infer_backend)))
    own = {k: v for k, v in (cfg.model_extra or {}).items() if k in stage.option_keys}  # RunConfig validated the others
    if own:
        try:
            stage.options_model().model_validate(own)
        except ValidationError as err:
            out += [FieldProblem(str(e["loc"][0]), own.get(str(e["loc"][0])), pydantic_message(e)) for e in err.errors() if e["loc"]]
    out += [FieldProblem(key, value, message) for key, value, message in stage.problems(cfg)]
    return out


def _interleave_problems(cfg: RunConfig) -> list[FieldProblem]:
    text = cfg.interleave_probs or ""
    if cfg.mix_strategy == "concat":
        return [FieldProblem("interleave_probs", text, _("interleave_probs is only valid with mix_strategy interleave_under, interleave_over or interleave_once"))]
    try:
        probs = [float(p) for p in comma_items(text)]
    except ValueError:
        return [FieldProblem("interleave_probs", text, _("numbers separated by commas, one per dataset, e.g. 0.7,0.3"))]
    for key in ("dataset", "eval_dataset"):
        names = comma_items(getattr(cfg, key))
        if names and len(names) != len(probs):
            return [FieldProblem("interleave_probs", text, _("{n} probabilities for the {count} dataset(s) of {key}; give one per dataset").format(n=len(probs), count=len(names), key=key))]
    if any(p < 0 for p in probs) or not math.isclose(sum(probs), 1.0, abs_tol=1e-6):
        return [FieldProblem("interleave_probs", text, _("probabilities must be at least 0 and add up to 1 (these add up to {total})").format(total=f"{sum(probs):g}"))]
    return []
