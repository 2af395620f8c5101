"""Vision-language models whose code is not part of transformers: MOSS-VL (LLaMA-Factory's
``mossvl_*.yaml`` examples, template ``moss_vl``). Its model loads only with
``trust_remote_code: true`` and the Python files its config.json names (``auto_map``) in the
model's folder; ftui then still cannot train it: LLaMA-Factory 0.9.5, whose encoding ftui
matches token for token, has no ``moss_vl`` template nor a MOSS-VL image plugin (the examples
come from a later LLaMA-Factory), so there is nothing to match. Each case is refused naming its
reason, in the preflight (``ftui.config.model_checks``), before the generic "multimodal model of
a family ftui does not train" refusal, which this one replaces for MOSS-VL. No torch here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ftui.config.problems import FieldProblem
from ftui.config.schema import RunConfig
from ftui.i18n import _

MOSS_VL_TEMPLATE = "moss_vl"
VISION_KEYS = ("vision_config", "visual", "vision_tower")


def is_moss_vl(cfg: RunConfig, model: dict[str, Any] | None) -> bool:
    """A MOSS-VL run: its template, its config.json (a "moss" model type with a vision tower),
    or its name."""
    if cfg.template == MOSS_VL_TEMPLATE or "moss-vl" in cfg.model_name_or_path.lower():
        return True
    return bool(model is not None and str(model.get("model_type", "")).lower().startswith("moss")
                and any(k in model for k in VISION_KEYS))


def code_files(model: dict[str, Any] | None) -> list[str]:
    """The Python files a model's config.json names in ``auto_map`` ("module.Class" or
    "repo--module.Class"), in order, once each."""
    auto_map = model.get("auto_map") if isinstance(model, dict) else None
    if not isinstance(auto_map, dict):
        return []
    names = []
    for value in auto_map.values():
        for ref in value if isinstance(value, list) else [value]:
            if isinstance(ref, str) and "." in ref:
                names.append(ref.split("--")[-1].rsplit(".", 1)[0] + ".py")
    return list(dict.fromkeys(names))


def model_folders(name: str) -> list[Path]:
    """Where the model's files are on this machine: its local folder, or its hub cache snapshots."""
    from ftui.plan.model_files import cached_snapshots
    from ftui.rundir.paths import resolve_model_path

    try:
        local = Path(resolve_model_path(name)).expanduser()
    except RuntimeError:
        local = None
    folders = [local] if local is not None and (local / "config.json").is_file() else []
    return folders + cached_snapshots(name)


def missing_code(cfg: RunConfig, model: dict[str, Any] | None) -> list[str]:
    """The model's Python files that are not beside its config.json (all of them, or a
    stand-in name, when the model or its auto_map is not here)."""
    files = code_files(model)
    folders = model_folders(cfg.model_name_or_path)
    if model is None or not files or not folders:
        return files or ["modeling_*.py (config.json: auto_map)"]
    return [f for f in files if not any((folder / f).is_file() for folder in folders)]


def moss_vl_problems(cfg: RunConfig, model: dict[str, Any] | None) -> list[FieldProblem]:
    """Why a MOSS-VL run cannot start (module doc); [] for any other model."""
    if not is_moss_vl(cfg, model):
        return []
    if not cfg.trust_remote_code:
        return [FieldProblem("trust_remote_code", False, _(
            "MOSS-VL needs its own code (trust_remote_code): its model is not part of transformers and loads only with "
            "trust_remote_code: true and the model's Python files in its folder; ftui trains the vision-language models "
            "Qwen2-VL, Qwen2.5-VL and Qwen3-VL"))]
    missing = missing_code(cfg, model)
    if missing:
        return [FieldProblem("trust_remote_code", True, _(
            "MOSS-VL needs its own code (trust_remote_code) and it is not here: {files} missing beside the model's "
            "config.json ({model}); download the model with its Python files into a folder and give that folder "
            "(ftui downloads nothing while training)").format(files=", ".join(missing), model=cfg.model_name_or_path))]
    return [FieldProblem("template", cfg.template, _(
        "MOSS-VL's model loads with its own code (trust_remote_code), but ftui does not encode its images: LLaMA-Factory "
        "0.9.5, whose encoding ftui matches token for token, has no moss_vl template nor a MOSS-VL image plugin; train a "
        "Qwen2-VL, Qwen2.5-VL or Qwen3-VL model"))]
