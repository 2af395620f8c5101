"""Where a run's trained weights are, and how to write and load them.

One place knows the run directory's model files: ``final/`` (a full model, or a LoRA
adapter over the base, plus the tokenizer and the chat template the run used), the
checkpoints (``checkpoints/step-N``: DCP shards of the torch engines, or DeepSpeed's
partitions; the trainable weights only, over the base), and the base model (the config's
``model_name_or_path``, or ``base_model/`` for a random-weight run). Chat loads through it;
predict and export will.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ftui.config.schema import RunConfig
from ftui.i18n import _
from ftui.rundir.paths import BASE_MODEL_DIR, DEEPSPEED_TAG, FINAL_DIR, PISSA_INIT_DIR, STATE_DIR
from ftui.runner.hub import model_source
from ftui.runner.vlm import family_of
from ftui.rundir.checkpoints import CheckpointError, resolve_checkpoint
from ftui.stages import describe as describe_stage


class WeightsError(Exception):
    """Weights that cannot be found or loaded; the message says which and what to do."""


# --- Writing (the training job)

def save_random_base(model: nn.Module, tokenizer: Any, run_dir: Path) -> None:
    """A random-weight base is not on disk anywhere: keep it, so adapters and chat can load it."""
    base = run_dir / BASE_MODEL_DIR
    model.save_pretrained(base, safe_serialization=True)
    tokenizer.save_pretrained(base)
    model.config._name_or_path = str(base.resolve())
    model.name_or_path = str(base.resolve())


def save_pissa_start(model: nn.Module, run_dir: Path) -> None:
    """PiSSA's adapter as it starts (before any step), the reference final/ is converted
    against; kept from the run's first start (a resume rebuilds the same start)."""
    start = run_dir / PISSA_INIT_DIR
    if start.is_dir():
        return
    config = model.peft_config["default"]
    init, config.init_lora_weights = config.init_lora_weights, True  # reloading it must not run PiSSA again
    try:
        model.save_pretrained(start, safe_serialization=True)
    finally:
        config.init_lora_weights = init


def save_final(engine: Any, tokenizer: Any, chat_template: str, run_dir: Path, extras: Any = None) -> None:
    """final/: the model or adapter plus tokenizer, loadable by plain transformers / peft;
    ``extras(state_dict)`` -> (the model's weights, {file name: tensors}) puts a stage's own
    weights (a reward model's value head) in files of their own beside them.

    Collective (FSDP and ZeRO-3 gather their shards onto rank 0, which writes). Written under
    a temporary name and renamed, so a crash never leaves half a final/."""
    state_dict = engine.full_state_dict()
    if not engine.info.is_main:
        return
    final = run_dir / FINAL_DIR
    tmp = run_dir / (FINAL_DIR + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    module = engine.unwrap()
    pissa_start = run_dir / PISSA_INIT_DIR
    # A PiSSA adapter only works over the residual base it was cut from; converted against its
    # starting point it becomes a plain LoRA adapter (rank x 2) over the original base, which
    # is what final/ must be (LLaMA-Factory's pissa_convert).
    convert = {"path_initial_model_for_weight_conversion": str(pissa_start)} if pissa_start.is_dir() else {}
    files: dict[str, dict[str, torch.Tensor]] = {}
    if extras is not None:
        kept, files = extras(state_dict if state_dict is not None else module.state_dict())
        if files:  # otherwise the weights are saved exactly as without a stage's extras
            state_dict = kept
    module.save_pretrained(tmp, safe_serialization=True, state_dict=state_dict, **convert)
    if files:
        from safetensors.torch import save_file

        for name, tensors in files.items():
            save_file({k: v.detach().cpu().contiguous() for k, v in tensors.items()}, str(tmp / name))
    tokenizer.chat_template = chat_template  # chat uses the trained format
    tokenizer.save_pretrained(tmp)
    if family_of(module) is not None:
        copy_processor_files(model_source(engine.cfg.model_name_or_path), tmp)
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)


# a vision-language model's processor configuration, beside its weights: what chat, predict and
# export (and plain transformers) read to turn images into the tensors the model was trained on
PROCESSOR_FILES = ("preprocessor_config.json", "video_preprocessor_config.json", "processor_config.json")


def copy_processor_files(source: str, out: Path) -> None:
    """The base model's processor files (a local folder's, or a hub model's from the cache:
    training read them, so they are there; no network), byte for byte, into ``out``."""
    from transformers.utils import cached_file

    folder = Path(source)
    for name in PROCESSOR_FILES:
        if folder.is_dir():
            found: Any = folder / name if (folder / name).is_file() else None
        else:
            found = cached_file(source, name, local_files_only=True, _raise_exceptions_for_missing_entries=False,
                                _raise_exceptions_for_connection_errors=False)
        if found:
            shutil.copyfile(found, out / name)


# --- Finding

def base_model_path(run_dir: Path, cfg: RunConfig) -> Path:
    """The weights training started from: the saved random base, or the config's model."""
    saved = run_dir / BASE_MODEL_DIR
    return saved if saved.is_dir() else Path(model_source(cfg.model_name_or_path))


@dataclass(frozen=True)
class TrainedWeights:
    """One loadable set of weights of a run."""

    kind: str  # "base", "final" (full model), "final-adapter", "checkpoint" (DCP), "checkpoint-deepspeed"
    path: Path  # the model directory, the adapter, or the checkpoint
    base: Path  # the base model the trainable weights sit on
    tokenizer: Path  # where the tokenizer (and the run's chat template) is
    label: str

    @property
    def from_checkpoint(self) -> bool:
        return self.kind.startswith("checkpoint")


def locate(run_dir: Path, cfg: RunConfig, which: str | None = None) -> TrainedWeights:
    """``which``: "base", "final", "latest", a step ("step-N" or "N") or a checkpoint
    directory; None: final/ when it exists, else the newest sound checkpoint."""
    base = base_model_path(run_dir, cfg)
    final = run_dir / FINAL_DIR
    tokenizer = final if final.is_dir() else base
    if which == "base":
        return TrainedWeights("base", base, base, tokenizer, _("base model of {run}").format(run=run_dir.name))
    if which in (None, "final") and final.is_dir():
        kind = "final-adapter" if (final / "adapter_config.json").is_file() else "final"
        return TrainedWeights(kind, final, base, final, f"{run_dir.name} final")
    try:
        ckpt = resolve_checkpoint(run_dir, None if which in (None, "final", "latest") else which.removeprefix("step-"))
    except CheckpointError as err:
        raise WeightsError(_("{error}; and it has no final/ yet").format(error=err) if which in (None, "final") else str(err)) from None
    kind = "checkpoint" if (ckpt / STATE_DIR).is_dir() else "checkpoint-deepspeed"
    if kind == "checkpoint-deepspeed" and not (ckpt / DEEPSPEED_TAG).is_dir():
        raise WeightsError(_("{path} holds neither a torch ({state}/) nor a DeepSpeed ({tag}/) checkpoint").format(
            path=ckpt, state=STATE_DIR, tag=DEEPSPEED_TAG))
    return TrainedWeights(kind, ckpt, base, tokenizer, f"{run_dir.name} {ckpt.name}")


# --- Loading (on one process, for chat, predict and export)

def load_pretrained(path: Path, dtype: torch.dtype, trust_remote_code: bool = False) -> nn.Module:
    """A model directory written by save_pretrained, on the CPU, from safetensors only; a
    vision-language model with its vision tower (ftui.runner.model.auto_model_class)."""
    from transformers import AutoConfig

    from ftui.runner.model import auto_model_class

    try:
        config = AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code)
        return auto_model_class(config).from_pretrained(path, dtype=dtype, trust_remote_code=trust_remote_code,
                                                        use_safetensors=True)
    except OSError as err:
        raise WeightsError(_("cannot load a model from {path}: {error}").format(path=path, error=str(err).splitlines()[0])) from None


def with_adapter(model: nn.Module, adapter: Path) -> nn.Module:
    from peft import PeftModel

    return PeftModel.from_pretrained(model, adapter)


def fit_vocab(model: nn.Module, weights: TrainedWeights, cfg: RunConfig | None) -> nn.Module:
    """The base with room for the tokens the run's template added to the tokenizer (training
    grew the embeddings the same way), so the run's adapter or checkpoint fits it and prompts
    with those tokens stay within the vocabulary."""
    if cfg is None or not cfg.template:
        return model
    from transformers import AutoTokenizer

    from ftui.data.chat_template import fix_tokenizer
    from ftui.presets.templates import TEMPLATES
    from ftui.runner.model import grow_embeddings

    tok = AutoTokenizer.from_pretrained(weights.tokenizer, trust_remote_code=cfg.trust_remote_code)
    fix_tokenizer(tok, TEMPLATES[cfg.template])
    grow_embeddings(model, tok)
    return model


def load_weights(weights: TrainedWeights, cfg: RunConfig | None, dtype: torch.dtype, value_head: bool = False) -> nn.Module:
    """The model the weights describe, on the CPU, in ``dtype``, in eval mode.

    A checkpoint holds only what trained (the full model, the adapter or the unfrozen layers),
    in fp32: the base is built in fp32, the run's method applied, the checkpoint's weights
    loaded into it, and only then is it cast, so nothing is rounded twice. ``value_head``: a
    reward run's checkpoint is loaded with its value head on (export keeps it; chat and
    predict want the language model's logits)."""
    trust = bool(cfg and cfg.trust_remote_code)
    if weights.kind == "final":
        model = load_pretrained(weights.path, dtype, trust)
    elif weights.kind == "base":
        model = fit_vocab(load_pretrained(weights.path, dtype, trust), weights, cfg)
    elif weights.kind == "final-adapter":
        model = with_adapter(fit_vocab(load_pretrained(weights.base, dtype, trust), weights, cfg), weights.path)
    else:
        if cfg is None:
            raise WeightsError(_("a checkpoint can only be loaded with its run's config"))
        model = _from_checkpoint(weights, cfg, value_head)
        model = model.to(dtype=dtype)
    return model.eval()


def _from_checkpoint(weights: TrainedWeights, cfg: RunConfig, value_head: bool = False) -> nn.Module:
    from ftui.runner.model import apply_method

    model = fit_vocab(load_pretrained(weights.base, torch.float32, cfg.trust_remote_code), weights, cfg)
    model = apply_method(model, cfg.model_copy(update={"gradient_checkpointing": False}))
    if value_head and describe_stage(cfg.stage).value_head:  # the checkpoint holds the head as the run trained it
        from ftui.runner.reward import install_value_head

        install_value_head(model)
    if weights.kind == "checkpoint":
        _load_dcp(model, weights.path / STATE_DIR)
    else:
        _load_deepspeed(model, weights.path, cfg)
    return model


def _load_dcp(model: nn.Module, state_dir: Path) -> None:
    """The torch engines' checkpoint (DCP: single, DDP, FSDP), resharded onto this one process."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict, set_model_state_dict

    opts = StateDictOptions(ignore_frozen_params=True, strict=False)
    state = {"model": get_model_state_dict(model, options=opts)}
    dcp.load(state, checkpoint_id=str(state_dir))
    set_model_state_dict(model, state["model"], options=opts)


def _load_deepspeed(model: nn.Module, ckpt: Path, cfg: RunConfig) -> None:
    """DeepSpeed's partitions (any ZeRO stage, any number of ranks), merged into fp32 weights
    on the CPU by DeepSpeed's own converter (the zero_to_fp32 logic)."""
    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

    state = get_fp32_state_dict_from_zero_checkpoint(str(ckpt), tag=DEEPSPEED_TAG,
                                                     exclude_frozen_parameters=cfg.finetuning_type != "full")
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    missing = sorted(trainable - set(state))
    if missing:
        raise WeightsError(_("{name} lacks {n} trained weight(s) of this run's model (first: {first}); "
                             "it was written for another model or method").format(name=ckpt.name, n=len(missing), first=missing[0]))
    model.load_state_dict(state, strict=False)


def load_reward_model(final: Path, base: Path | None = None, dtype: torch.dtype = torch.float32) -> nn.Module:
    """A trained reward model from its final/ folder, ready to score: the full model, or the
    base with the adapter merged, with the value head on. ``model(**inputs).logits[..., 0]``
    is then the value per position; ``ftui.runner.reward.score`` gives the answer's score."""
    from ftui.runner.reward import VALUE_HEAD_FILE, install_value_head, load_value_head

    final = Path(final)
    if (final / "adapter_config.json").is_file():
        if base is None:
            raise ValueError(_("a LoRA reward model needs its base model's folder"))
        model = with_adapter(load_pretrained(base, dtype), final)
        model = model.merge_and_unload()
    else:
        model = load_pretrained(final, dtype)
    install_value_head(model, load_value_head(final / VALUE_HEAD_FILE))
    return model.eval()
