"""The checks of a dataset with images against the rest of the config: the model must be a
vision-language family ftui trains (``ftui.presets.vision_families``) with its image processor's
settings at hand, the template must encode images, packing is for the families whose rows
can be packed (not Gemma 3), and saved encodings (tokenized_path) wait for a later slice; and
the first records' images, each opened and
decoded whole (ftui.data.media, ftui.data.media_files) with their placeholders counted.

Part of the one preflight (ftui.config.preflight, through file_checks.dataset_problems): a
multimodal run that would fail, or train something else than asked, is refused before any
run directory exists. No torch here.
"""

from __future__ import annotations

from typing import Any

from ftui.config.problems import FieldProblem
from ftui.config.schema import RunConfig
from ftui.data.media import dataset_media, record_media
from ftui.data.media_files import verify_image
from ftui.data.media_tokens import VisionProcessor
from ftui.data.records import DatasetSpec
from ftui.i18n import _
from ftui.presets.vision_families import FAMILY_NAMES, IMAGE_TEMPLATES, VISION_FAMILIES, template_fits, vision_family
from ftui.config.video_checks import video_problems

# LLaMA-Factory's templates made for vision-language models, with the mm_plugin each encodes
# images with (its template.py): a text model given one is refused (LLaMA-Factory fails on every
# example: "Processor was not found"). Gemma 3's template is a text template too (Gemma 3 1B);
# every template that encodes images is in ftui.presets.vision_families.IMAGE_TEMPLATES.
VISION_TEMPLATES = {"qwen2_vl": "qwen2_vl", "qwen3_vl": "qwen3_vl", "qwen3_vl_nothink": "qwen3_vl", "llava": "llava",
                    "intern_vl": "intern_vl"}


def read_processor(model_name_or_path: str) -> VisionProcessor:
    """The image processor of a model: its preprocessor_config.json in the local folder or the
    hub cache (ftui.plan.model_json), with the processor_config.json beside it. ValueError when
    there is none (a run needs it: LLaMA-Factory fails with "Processor was not found") or it is
    malformed (named)."""
    from ftui.plan.model_json import model_image_processor

    processor = model_image_processor(model_name_or_path)
    if processor is None:
        raise ValueError(_("no preprocessor_config.json (the image processor's settings) for {model}; copy it from the "
                           "model's release into its folder").format(model=repr(model_name_or_path)))
    return processor


def template_model_problems(cfg: RunConfig, model: dict[str, Any] | None) -> list[FieldProblem]:
    """A vision-language template (qwen2_vl, qwen3_vl, qwen3_vl_nothink, llava, intern_vl) for a
    model that reads text only: LLaMA-Factory fails on every example ("Processor was not found")."""
    if cfg.template not in VISION_TEMPLATES or model is None or vision_family(model.get("model_type")) is not None:
        return []
    return [FieldProblem("template", cfg.template, _(
        "template {template} encodes images for {families} models, but this model (model_type {model_type}) reads text only: "
        "give the model's text template (or empty for the tokenizer's own), or a vision-language model").format(
        template=cfg.template, families=FAMILY_NAMES, model_type=f"{model.get('model_type', '?')!s:.40}"))]


def freeze_problems(cfg: RunConfig, model: dict[str, Any] | None) -> list[FieldProblem]:
    """A vision-language model with its vision tower, projector and language model all frozen:
    nothing would train (LLaMA-Factory's forbidden modules would cover the whole model). The
    freeze_* keys leave a text-only model alone, as in LLaMA-Factory."""
    if model is None or vision_family(model.get("model_type")) is None:
        return []
    if cfg.freeze_language_model and cfg.freeze_vision_tower and cfg.freeze_multi_modal_projector:
        return [FieldProblem("freeze_language_model", True, _(
            "with freeze_vision_tower and freeze_multi_modal_projector on too, no part of the model would train; set "
            "freeze_language_model false, or unfreeze the vision tower or the projector"))]
    return []


def media_config_problems(cfg: RunConfig, spec: DatasetSpec, key: str, model: dict[str, Any] | None,
                          first: Any = None) -> list[FieldProblem]:
    """What a dataset with images asks of the rest of the config (``key``: dataset or
    eval_dataset; ``model``: the model's config.json, None when it is not here yet). The stage
    and the media kinds are judged with the registry (ftui.data.media.media_refusal)."""
    if not {"images", "videos"} & set(dataset_media(spec, first)):  # videos: the same model and template rules
        return []
    out: list[FieldProblem] = video_problems(cfg, spec, key, first)
    family = vision_family(model.get("model_type")) if model is not None else None
    if model is not None and family is None:
        out.append(FieldProblem(key, getattr(cfg, key), _(
            "the dataset {name} has images, but {model} (model_type {model_type}) reads text only: use a vision-language "
            "model of a family ftui trains ({families}), or a text dataset").format(
            name=spec.name, model=cfg.model_name_or_path, model_type=f"{model.get('model_type', '?')!s:.40}", families=FAMILY_NAMES)))
    elif family is not None:
        try:
            read_processor(cfg.model_name_or_path)
        except ValueError as err:
            out.append(FieldProblem("model_name_or_path", cfg.model_name_or_path, str(err)))
    if family is not None and cfg.template in IMAGE_TEMPLATES and not template_fits(cfg.template, family):
        out.append(FieldProblem("template", cfg.template, _(
            "the dataset {name} has images and template {template} encodes them for another family than this {family} "
            "model: set template: {wanted}").format(name=spec.name, template=cfg.template, family=family.name,
                                                   wanted=family.template)))
    elif cfg.template not in IMAGE_TEMPLATES and (family is not None or model is None):  # a text model: said above
        wanted = family.template if family is not None else " / ".join(sorted({f.template for f in VISION_FAMILIES}))
        said = (_("the tokenizer's own chat template (template empty)") if cfg.template is None else
                _("template {template}").format(template=cfg.template))
        out.append(FieldProblem("template", cfg.template, _(
            "the dataset {name} has images and {said} encodes text only: set template: {wanted}").format(
            name=spec.name, said=said, wanted=wanted)))
    if (cfg.packing or cfg.neat_packing) and family is not None:
        out += packing_problems(cfg, family.name)
    if cfg.tokenized_path:
        out.append(FieldProblem("tokenized_path", cfg.tokenized_path, _(
            "saving or reading encoded data with images (tokenized_path) is not supported yet (the dataset {name} has "
            "images); remove tokenized_path").format(name=spec.name)))
    return out


def first_records_media(spec: DatasetSpec, records: list[Any]) -> None:
    """The first records' media, as the run will read them: each record's files resolved, its
    placeholders counted and each image decoded whole (a missing, unreadable, truncated,
    corrupt, huge or non-image file is named with its record). Raises a MediaError."""
    from ftui.data.preference_media import preference_images
    from ftui.stages import PAIRS

    from ftui.data.audio_files import verify_audio

    for index, record in enumerate(records):
        if spec.ranking:  # a pair's images (the preference stages read no audios)
            media = {"images": preference_images(record, spec, index, PAIRS), "audios": []}
        else:  # one read of the record's files (each header opened once)
            media = record_media(record, spec, index)
        for path in media["images"]:
            verify_image(path, spec, index)
        for path in media["audios"]:  # every frame of the first records' audios decoded (ftui.data.audio_files)
            verify_audio(path, spec, index)


def packing_problems(cfg: RunConfig, family: str) -> list[FieldProblem]:
    """Packing rows with images (ftui.runner.media_packing): done for every family but Gemma 3."""
    problem = vision_packing_problem(family, cfg)
    if problem is None:
        return []
    return [FieldProblem("neat_packing" if cfg.neat_packing else "packing", True, problem)]


def vision_packing_problem(family: str, cfg: RunConfig) -> str | None:
    """Why rows of this family cannot be packed (None: they can). Gemma 3 builds its own
    attention mask, its image tokens attending to each other both ways and its sliding-window
    layers seeing a window: a packed row's block mask between examples would replace it
    (LLaMA-Factory packs Gemma 3 all the same, with that mask)."""
    key = "neat_packing" if cfg.neat_packing else "packing"
    if family == "qwen2_audio":  # the runner's last word; preflight names the dataset (ftui.config.audio_checks)
        return _("{key} is not supported for qwen2_audio models yet: packed rows carry images only; set {key} false").format(key=key)
    if family != "gemma3":
        return None
    return _("{key} is not supported for gemma3 vision-language models: Gemma 3 builds its own attention mask (an image's "
             "tokens attend to each other both ways, sliding-window layers), which a packed row's mask between examples would "
             "replace; set {key} false").format(key=key)
