"""What a dataset with audios asks of the rest of the config, checked before a run (no torch):
a model that reads audio (Qwen2-Audio), its template ``qwen2_audio``, rows that are not packed
and not read from ``tokenized_path``; and the template ``qwen2_audio`` given to a model without
an audio tower (LLaMA-Factory 0.9.5 fails on every example there: "Audio feature extractor was
not found"). The first records' audio files are decoded whole (``verify_records_audio``)."""

from __future__ import annotations

from typing import Any

from ftui.config.problems import FieldProblem
from ftui.config.schema import RunConfig
from ftui.data.records import DatasetSpec
from ftui.i18n import _
from ftui.presets.vision_families import AUDIO_TEMPLATES, VISION_FAMILIES, vision_family

AUDIO_FAMILY = next(f for f in VISION_FAMILIES if "audios" in f.media)


def reads_audio(model: dict[str, Any] | None) -> bool:
    family = vision_family(model.get("model_type")) if model is not None else None
    return family is not None and "audios" in family.media


def audio_template_problems(cfg: RunConfig, model: dict[str, Any] | None) -> list[FieldProblem]:
    """Template qwen2_audio for a model that reads no audio."""
    if cfg.template not in AUDIO_TEMPLATES or model is None or reads_audio(model):
        return []
    return [FieldProblem("template", cfg.template, _(
        "template {template} encodes audios for Qwen2-Audio, but this model (model_type {model_type}) has no audio tower: give "
        "the model's own template").format(template=cfg.template, model_type=f"{model.get('model_type', '?')!s:.40}"))]


def audio_config_problems(cfg: RunConfig, spec: DatasetSpec, key: str, model: dict[str, Any] | None,
                          media: tuple[str, ...]) -> list[FieldProblem]:
    """A dataset's audios against the model, template, packing and tokenized_path; images for
    a model that reads audios only."""
    out: list[FieldProblem] = []
    if "images" in media and reads_audio(model):
        out.append(FieldProblem(key, getattr(cfg, key), _(
            "the dataset {name} has images, but Qwen2-Audio reads audios only: use an audio dataset, or a vision-language "
            "model").format(name=spec.name)))
    if "audios" not in media:
        return out
    if model is not None and not reads_audio(model):
        out.append(FieldProblem(key, getattr(cfg, key), _(
            "the dataset {name} has audios, but {model} (model_type {model_type}) does not read audio: use a Qwen2-Audio "
            "model, or a dataset without audios").format(
            name=spec.name, model=cfg.model_name_or_path, model_type=f"{model.get('model_type', '?')!s:.40}")))
    if cfg.template not in AUDIO_TEMPLATES:
        out.append(FieldProblem("template", cfg.template, _(
            "the dataset {name} has audios and {said} has no audio encoding: set template: {wanted}").format(
            name=spec.name, wanted=AUDIO_FAMILY.template,
            said=_("the tokenizer's own chat template (template empty)") if cfg.template is None else
            _("template {template}").format(template=cfg.template))))
    if cfg.audio_sampling_rate != 16000:
        out.append(FieldProblem("audio_sampling_rate", cfg.audio_sampling_rate, _(
            "Qwen2-Audio's feature extractor (Whisper's) reads 16000 Hz audio and refuses another rate, as in LLaMA-Factory; "
            "set audio_sampling_rate: 16000")))
    if cfg.packing or cfg.neat_packing:
        field = "neat_packing" if cfg.neat_packing else "packing"
        out.append(FieldProblem(field, True, _("packing examples with audios is not supported yet (the dataset {name} has "
                                               "audios); set {field} false").format(name=spec.name, field=field)))
    if cfg.tokenized_path:
        out.append(FieldProblem("tokenized_path", cfg.tokenized_path, _(
            "saving or reading encoded data with audios (tokenized_path) is not supported yet (the dataset {name} has "
            "audios); remove tokenized_path").format(name=spec.name)))
    return out
