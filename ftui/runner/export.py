"""``python -m ftui.runner export JOB_DIR``: a run's final/ or checkpoint as a standalone model
directory (``ftui export``, the Export screen).

What it writes (in a temporary directory beside ``out``, made by ``tempfile.mkdtemp`` and
marked as the job's, renamed at the end, so a crash or a Stop never leaves half an export, and
an earlier ftui export at ``out`` given with ``force`` is only replaced once the new one is
whole: ``ftui.safety.export_out``):

- the model that plain ``transformers`` loads without peft: a LoRA / DoRA adapter merged into
  its base (peft's ``merge_and_unload``), a full or freeze fine-tune re-saved, a checkpoint of
  any engine gathered into full weights (``ftui.runner.weights``: DCP resharded onto this
  process, DeepSpeed ZeRO partitions through DeepSpeed's own zero_to_fp32 converter); built in
  fp32 and cast once to the export dtype; safetensors shards of at most ``max_shard_size`` with
  their index (transformers' save_pretrained);
- a reward model's value head beside it (``value_head.safetensors``, as LLaMA-Factory copies it);
- a vision-language model (``ftui.presets.vision_families``) with its vision tower under
  transformers' checkpoint names (what ``save_pretrained`` writes: ``visual.*`` beside
  ``model.*``), its processor files (``preprocessor_config.json`` ...: final/'s copy of the
  base's, byte for byte, as LLaMA-Factory saves the processor with the export) and a chat
  template that also renders messages whose content is a list of parts (``{"type": "image"}``
  becomes ``<|vision_start|><|image_pad|><|vision_end|>``, which the family's processor expands
  to the image's tokens): ``AutoModelForImageTextToText`` and ``AutoImageProcessor`` load it;
- the tokenizer with the chat template the run trained with, ``generation_config.json`` whose
  ``eos_token_id`` lists the template's stop tokens, an Ollama ``Modelfile``
  (``ftui.data.modelfile``) and ``ftui_export.json`` (where it came from; no config secrets);
- last, ``.ftui-export.json``: the files it wrote, so a later ``--force`` replaces them and
  nothing else;
- with ``gguf``, a GGUF file written from the exported shards (``ftui.runner.gguf_export``).

Events: job_start (job "export"), ``progress`` {done, total, phase} per phase (load, merge,
save, gguf), an ``export`` event with the files and the commands to use them, run_end.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import torch

from ftui.rundir.event_writer import EventWriter
from ftui.config.schema import RunConfig
from ftui.i18n import _
from ftui.rundir.paths import FINAL_DIR, JOB_SPEC_FILE
from ftui.runner.engines import DistInfo
from ftui.runner.faults import StopRequest
from ftui.runner.vlm import family_of
from ftui.presets.vision_families import VisionFamily
from ftui.stages import describe as describe_stage

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
MODELFILE = "Modelfile"
PROVENANCE_FILE = "ftui_export.json"


class ExportStopped(Exception):
    """Stop was asked for between two phases; nothing is left behind."""


def main(argv: list[str] | None = None) -> int:
    import sys

    from ftui.runner.job import run_job

    return run_job("export", export, sys.argv[1:] if argv is None else argv)


class ExportDirError(RuntimeError):
    """The out dir's side of an export went wrong (its temporary directory cannot be made, the
    out dir changed under the job): not an OSError, so the failure's hint does not send the
    user to check the weights."""


def export(job_dir: Path, cfg: RunConfig, info: DistInfo, writer: EventWriter | None, stop: StopRequest,
           resume: Path | None) -> tuple[str, str]:
    from ftui.safety.export_out import TEMP_KIND, temp_prefix
    from ftui.safety.owned_dirs import make_temp_dir, release, remove

    spec = json.loads((job_dir / JOB_SPEC_FILE).read_text(encoding="utf-8"))
    out = Path(spec["out"])
    emit = _Emitter(writer)
    emit.event("job_start", run_id=job_dir.name, job="export", source=spec.get("source_label") or cfg.model_name_or_path, precision=spec["dtype"],
               world_size=1, model=cfg.model_name_or_path, total_params=int(spec.get("needs", {}).get("params") or 0),
               method=cfg.method, out=spec["out"])
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp, lock = make_temp_dir(out.parent, temp_prefix(out), "", TEMP_KIND, job=str(job_dir), out=str(out))
    except OSError as err:
        raise ExportDirError(_("cannot create the export's temporary directory in {parent}: {reason}; the export is written "
                               "there and renamed to {out} when complete: choose an --out whose directory this user can "
                               "write").format(parent=out.parent, reason=err.strerror or err, out=out)) from None
    # the event names it, so a failure can say what a killed job left (ftui export, the screen)
    emit.event("log", level="info", message=_("writing into {tmp}, renamed to {out} when complete").format(tmp=tmp, out=out),
               temp_dir=str(tmp))
    try:
        result = write_export(spec, cfg, tmp, emit, stop)
        _replace(tmp, out, lock, bool(spec.get("force")))
    except BaseException as exc:
        left = remove(tmp, lock)
        if left:
            raise ExportDirError(_("{error}; its temporary directory {tmp} is left ({problem}): the next export into {parent} "
                                   "or ftui runs removes it").format(
                error=f"{type(exc).__name__}: {exc}".splitlines()[0][:300], tmp=tmp, problem=left[0], parent=out.parent)) from exc
        if isinstance(exc, ExportStopped):
            return "stopped", _("stopped before the export was complete; nothing was written to {out}").format(out=out)
        raise
    release(lock)
    from ftui.safety.export_out import usage_commands
    from ftui.safety.export_out import EXPORT_MARKER, TEMP_MARKER

    shown = [p for p in out.iterdir() if p.name not in (EXPORT_MARKER, TEMP_MARKER)]
    files = sorted(p.name for p in shown)
    size = sum(p.stat().st_size for p in shown if p.is_file())
    commands = usage_commands(out, result.get("gguf")) + (vision_gguf_commands(out) if result.get("vision") else [])
    emit.event("export", out=str(out), files=files, bytes=size, gguf=result.get("gguf"), dtype=spec["dtype"],
               params=result["params"], commands=commands)
    return "completed", _("exported {label} to {out}").format(label=result["label"], out=out)


class _Emitter:
    """Rank 0's events (there is only one rank)."""

    def __init__(self, writer: EventWriter | None):
        self.writer = writer

    def event(self, kind: str, **fields: Any) -> None:
        if self.writer is not None:
            self.writer.write(kind, **fields)

    def progress(self, phase: str, done: int, total: int) -> None:
        self.event("progress", phase=phase, done=done, total=total)

    def log(self, message: str) -> None:
        print(f"[ftui export] {message}", flush=True)
        self.event("log", level="info", message=message)


def _every_twentieth(emit: _Emitter, phase: str, done: int, total: int) -> None:
    """A progress event per 5% (a model has hundreds of tensors; watch prints each event)."""
    if done in (0, total) or done * 20 // total != (done - 1) * 20 // total:
        emit.progress(phase, done, total)


def _check(stop: StopRequest) -> None:
    if stop.requested:
        raise ExportStopped()


def write_export(spec: dict[str, Any], cfg: RunConfig, dest: Path, emit: _Emitter, stop: StopRequest) -> dict[str, Any]:
    """Everything the export holds, written into ``dest`` (a fresh directory)."""
    from ftui.runner.weights import load_weights, locate

    run_dir = Path(spec["run"])
    dtype = DTYPES[spec["dtype"]]
    weights = locate(run_dir, cfg, spec.get("checkpoint") or None)
    reward = describe_stage(cfg.stage).value_head  # a reward model's value head goes with it
    emit.progress("load", 0, 1)
    emit.log(_("loading {label} ({kind}) in fp32").format(label=weights.label, kind=weights.kind))
    model = load_weights(weights, cfg, torch.float32, value_head=reward)
    family = family_of(model)
    params = sum(p.numel() for p in model.parameters())
    emit.progress("load", 1, 1)
    _check(stop)

    if hasattr(model, "merge_and_unload"):  # a peft model: LoRA / DoRA / PiSSA, merged into the base
        emit.progress("merge", 0, 1)  # a phase only where there is an adapter to merge
        emit.log(_("merging the adapter into the base weights"))
        model = model.merge_and_unload()
        emit.progress("merge", 1, 1)
    model = model.to(dtype=dtype).eval()
    for config in (model.config, *(getattr(model.config, name, None) for name in getattr(model.config, "sub_configs", {}))):
        if config is not None:  # a vision-language model's text and vision configs say the dtype their weights have too
            config.dtype = dtype
    _check(stop)

    emit.progress("save", 0, 1)
    tokenizer, stop_ids, template = _tokenizer(weights.tokenizer, cfg, family)
    state = model.state_dict()
    head: dict[str, torch.Tensor] = {}
    if reward:
        from ftui.runner.reward import split_value_head

        state, head = split_value_head(state)
    dest.mkdir(parents=True, exist_ok=True)
    _set_generation_config(model, tokenizer, stop_ids)
    emit.log(_("writing safetensors shards of at most {size:g} GB in {dtype}").format(size=spec["max_shard_size"] / 1e9, dtype=spec["dtype"]))
    model.save_pretrained(dest, state_dict=state, max_shard_size=int(spec["max_shard_size"]))
    del model, state
    _copy_value_head(weights, head, dest)
    tokenizer.save_pretrained(dest)
    if family is not None:
        _copy_processor(weights, dest)
    emit.progress("save", 1, 1)
    _check(stop)

    gguf_name = None
    if spec.get("gguf"):
        from ftui.runner.gguf_export import gguf_file_name, write_gguf

        gguf_name = gguf_file_name(Path(spec["out"]), spec["gguf"])
        emit.log(_("writing {file} ({type})").format(file=gguf_name, type=spec["gguf"]))
        write_gguf(dest, dest / gguf_name, spec["gguf"], progress=lambda done, total: _every_twentieth(emit, "gguf", done, total))
        _check(stop)
    _write_modelfile(dest, tokenizer, stop_ids, template, cfg, gguf_name)
    provenance = {"source": weights.label, "kind": weights.kind, "run": str(run_dir), "checkpoint": spec.get("checkpoint"),
                  "stage": cfg.stage, "method": cfg.method, "base_model": cfg.model_name_or_path, "template": template,
                  "dtype": spec["dtype"], "gguf": gguf_name, "exported": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    if family is not None:  # what training resized images to before the processor (plain transformers does not)
        provenance.update(vision_family=family.name, image_max_pixels=cfg.image_max_pixels, image_min_pixels=cfg.image_min_pixels)
    (dest / PROVENANCE_FILE).write_text(json.dumps(provenance, indent=2) + "\n")
    from ftui.safety.export_out import write_marker

    write_marker(dest, run=str(run_dir), source=weights.label)  # last: what a later --force may replace
    return {"params": params, "gguf": gguf_name, "label": weights.label, "vision": family is not None}


def _tokenizer(path: Path, cfg: RunConfig, family: VisionFamily | None = None) -> tuple[Any, list[int], str | None]:
    """The tokenizer as the run used it: the template's stop words in the vocabulary, its
    chat template (the one final/ ships; for a vision-language model one that also renders
    image and video parts), left padding for generation (as LLaMA-Factory exports it); with
    the stop token ids and the named template (None: the tokenizer's own)."""
    from transformers import AutoTokenizer

    from ftui.data.chat_template import fix_tokenizer
    from ftui.presets.templates import TEMPLATES
    from ftui.runner.model import chat_template_for, template_name_for

    tok = AutoTokenizer.from_pretrained(path, trust_remote_code=cfg.trust_remote_code)
    if cfg.template:
        fix_tokenizer(tok, TEMPLATES[cfg.template])
    template = template_name_for(cfg, tok)
    tok.chat_template = chat_template_for(cfg, tok)
    if family is not None and template is not None:  # a tokenizer's own template is the family's, which has them
        tok.chat_template = with_media_parts(tok.chat_template, family)
    tok.padding_side = "left"
    tok.init_kwargs["padding_side"] = "left"
    stop_words = TEMPLATES[template].stop_words if template else ()
    stop_ids = [tok.eos_token_id] if tok.eos_token_id is not None else []
    for word_id in tok.convert_tokens_to_ids(list(stop_words)):
        if word_id is not None and word_id not in stop_ids:
            stop_ids.append(word_id)
    return tok, stop_ids, template


# Content parts as the family's own chat templates render them: an image or video part is the
# text its Processor expands to the image's tokens (Qwen's vision tokens around the pad token,
# LLaVA's <image>, Gemma 3's <start_of_image>, InternVL's <IMG_CONTEXT>), a text part its text.
_PARTS_MACRO = (
    "{%- macro ftui_content(content) -%}{%- if content is string -%}{{ content }}{%- else -%}{%- for part in content -%}"
    "{%- if part['type'] == 'image' or 'image' in part or 'image_url' in part -%}{{ IMAGE }}"
    "{%- elif part['type'] == 'video' or 'video' in part -%}{{ VIDEO }}"
    "{%- elif part['type'] == 'audio' or 'audio' in part or 'audio_url' in part -%}{{ AUDIO }}"
    "{%- elif 'text' in part -%}{{ part['text'] }}{%- endif -%}{%- endfor -%}{%- endif -%}{%- endmacro -%}")


def with_media_parts(chat_template: str, family: VisionFamily) -> str:
    """``chat_template`` (``ftui.data.chat_template.to_jinja``'s, which reads a message's content
    as a string) reading a content that is a list of parts too, as plain transformers and the
    family's processor pass messages with images: ``[{"type": "image"}, {"type": "text", ...}]``."""
    from ftui.runner.vision.plugins import plugin

    marks = plugin(family.plugin)
    if "audios" in family.media:  # Qwen2-Audio: an audio part is its three tokens (its processor expands <|AUDIO|>)
        image = video = "{{ " + json.dumps("") + " }}"
        audio = "{{ " + json.dumps("".join(marks.audio_tokens)) + " }}"
    else:
        image = "{{ " + json.dumps(marks.processor_image_text) + " }}"
        if marks.processor_video_text is not None:
            video = "{{ " + json.dumps(marks.processor_video_text) + " }}"
        else:  # transformers' chat templates have raise_exception
            video = "{{ raise_exception(" + json.dumps(_("a {family} model takes images, not videos").format(family=family.name)) + ") }}"
        audio = "{{ " + json.dumps("") + " }}"
    macro = _PARTS_MACRO.replace("{{ IMAGE }}", image).replace("{{ VIDEO }}", video).replace("{{ AUDIO }}", audio)
    body = chat_template.replace("message['content']", "ftui_content(message['content'])")
    return macro + body.replace("messages[0]['content']", "ftui_content(messages[0]['content'])")


def vision_gguf_commands(out: Path) -> list[str]:
    """llama.cpp's own conversion of a vision-language export: the language model, then the
    vision tower's projector file (mmproj), which ftui's GGUF writer does not make."""
    import shlex

    return [f"python convert_hf_to_gguf.py {shlex.quote(str(out))} --outtype f16",
            f"python convert_hf_to_gguf.py {shlex.quote(str(out))} --mmproj"]


def _copy_processor(weights: Any, dest: Path) -> None:
    """A vision-language model's processor files: final/'s (copied from the base when the run
    ended), else the base's; a model without them cannot turn an image into its inputs."""
    from ftui.runner.weights import PROCESSOR_FILES, WeightsError, copy_processor_files

    sources = [weights.path] if weights.kind.startswith("final") else []
    for source in (*sources, weights.base):
        if Path(source, PROCESSOR_FILES[0]).is_file() or not Path(source).is_dir():
            copy_processor_files(str(source), dest)
            break
    if not (dest / PROCESSOR_FILES[0]).is_file():
        raise WeightsError(_("neither {final} nor the base model {base} has {file}, the image processor's settings a "
                                  "vision-language model needs; put the base model's {file} in {base} and export again").format(
            final=weights.path, base=weights.base, file=PROCESSOR_FILES[0]))


def _set_generation_config(model: Any, tokenizer: Any, stop_ids: list[int]) -> None:
    """generate() stops at EOS or any of the template's stop tokens (what ftui's chat and
    LLaMA-Factory's inference stop at), and pads with the tokenizer's pad token."""
    gen = model.generation_config
    if stop_ids:
        gen.eos_token_id = stop_ids[0] if len(stop_ids) == 1 else list(stop_ids)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (stop_ids[0] if stop_ids else None)
    if pad is not None:
        gen.pad_token_id = pad
    if tokenizer.bos_token_id is not None:
        gen.bos_token_id = tokenizer.bos_token_id


def _copy_value_head(weights: Any, head: dict[str, torch.Tensor], dest: Path) -> None:
    """A reward model's value head: the checkpoint's (split from its weights), or final/'s file."""
    from ftui.runner.reward import VALUE_HEAD_FILE

    if head:
        from safetensors.torch import save_file

        save_file({k: v.detach().to(torch.float32).contiguous() for k, v in head.items()}, str(dest / VALUE_HEAD_FILE))
    elif (weights.path / VALUE_HEAD_FILE).is_file() and weights.path.name == FINAL_DIR:
        shutil.copy2(weights.path / VALUE_HEAD_FILE, dest / VALUE_HEAD_FILE)


def _write_modelfile(dest: Path, tokenizer: Any, stop_ids: list[int], template: str | None, cfg: RunConfig, gguf_name: str | None) -> None:
    from ftui.data.modelfile import modelfile
    from ftui.presets.templates import TEMPLATES

    try:
        max_positions = json.loads((dest / "config.json").read_text()).get("max_position_embeddings")
    except (OSError, ValueError):
        max_positions = None
    text = modelfile(TEMPLATES[template] if template else None, tokenizer.bos_token, tokenizer.eos_token,
                     [tokenizer.convert_ids_to_tokens(i) for i in stop_ids], max_positions,
                     source=f"./{gguf_name}" if gguf_name else ".", default_system=cfg.default_system)
    (dest / MODELFILE).write_text(text, encoding="utf-8")


class OutDirTaken(ExportDirError):
    """The out dir gained content after the export was prepared, and force was not given."""


def _replace(tmp: Path, out: Path, lock: int, force: bool) -> None:
    """Puts the finished export at ``out``. A missing or empty out dir is replaced by one
    rename (rename(2) replaces an empty directory and never follows a link). A non-empty one
    (only with force, and only an earlier ftui export: ``export_out.replace_problem``) is moved
    aside into a marked temporary directory, checked again there (nothing can swap it any
    more), the new one renamed into place, then the old one removed: the new export is
    complete beside the old one before the old one goes."""
    from ftui.safety.export_out import ASIDE_KIND, aside_prefix, link_problem, replace_problem, TEMP_MARKER
    from ftui.safety.owned_dirs import make_temp_dir, remove
    from ftui.safety.files import current_umask

    umask = current_umask()
    tmp.chmod(0o777 & ~(0o022 if umask is None else umask))  # mkdtemp made it 0700; the export gets the mode a new directory gets
    try:
        os.rename(tmp, out)
    except OSError as err:
        if err.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR, errno.EISDIR):
            raise ExportDirError(_("cannot rename the finished export to {out}: {reason}").format(out=out, reason=err.strerror or err)) from None
        if os.path.islink(out):
            raise ExportDirError(link_problem(out, out)) from None
        if not force:
            raise OutDirTaken(_("{out} is no longer empty (something was written there while the export ran); "
                                "export again to another directory, or with --force to replace an earlier ftui export there").format(
                out=out)) from None
        problem = replace_problem(out)
        if problem:
            raise ExportDirError(problem) from None
        aside, aside_lock = make_temp_dir(out.parent, aside_prefix(out), "", ASIDE_KIND, out=str(out))
        old = aside / "old"
        os.rename(out, old)
        problem = replace_problem(old, shown_as=out)
        if problem:  # it changed between the check and the move: put it back as it was
            os.rename(old, out)
            remove(aside, aside_lock)
            raise ExportDirError(problem) from None
        try:
            os.rename(tmp, out)
        except OSError as err2:
            os.rename(old, out)
            remove(aside, aside_lock)
            raise ExportDirError(_("cannot rename the finished export to {out}: {reason}").format(
                out=out, reason=err2.strerror or err2)) from None
        left = remove(aside, aside_lock)
        if left:
            print("[ftui export] " + _("the earlier export, moved aside to {path}, could not all be removed ({problem}); "
                                       "the next export into {parent} or ftui runs removes it").format(
                path=aside, problem=left[0], parent=out.parent), flush=True)
    try:
        os.unlink(out / TEMP_MARKER)  # the lock stays with the caller's descriptor until it closes
    except OSError:
        pass
