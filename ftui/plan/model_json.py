"""A model's JSON files (config.json, preprocessor_config.json, processor_config.json) read
where a run would find them, without torch: the local folder (or the demo's), else the hub
cache's snapshots, newest first. The config's checks, the planner and the export estimate read
them through here, so a file is found, and a malformed one said, the same way everywhere.

The first file that is there decides, as it does for transformers: a local folder's malformed
file is not passed over for a cached copy (the run would load the folder's and fail on it), it
is a ``ModelJSONError`` naming the file and what is wrong.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ftui.data.media_tokens import VisionProcessor, processor_from_config
from ftui.i18n import _
from ftui.plan.model_files import cached_snapshots
from ftui.rundir.paths import resolve_model_path
from ftui.safety.bounded_input import load_json

PROCESSOR_CONFIG = "processor_config.json"


class ModelJSONError(ValueError):
    """A model's JSON file is there but is not valid JSON, or not a JSON object."""


def model_file_candidates(model_name_or_path: str, filename: str) -> list[Path]:
    """Where ``filename`` of the model is looked for, in order: the local folder (the demo's for
    its name), then each hub cache snapshot of the name."""
    try:
        candidates = [Path(resolve_model_path(model_name_or_path)).expanduser() / filename]
    except (RuntimeError, ValueError):  # ~nosuchuser/...; a NUL in a typed name
        candidates = []
    return candidates + [snapshot / filename for snapshot in cached_snapshots(model_name_or_path)]


def read_json_object(path: Path) -> dict[str, Any] | None:
    """The JSON object in ``path``; None when the file is not there or cannot be read (OSError);
    ModelJSONError naming the file when it is not valid JSON or not an object."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise ModelJSONError(_("{path} is not valid JSON: {error}").format(path=path, error=err)) from None
    except (OSError, ValueError):  # ValueError: a NUL in the path
        return None
    try:
        data = load_json(text)
    except ValueError as err:  # json.JSONDecodeError, JSONTooDeep
        raise ModelJSONError(_("{path} is not valid JSON: {error}").format(path=path, error=err)) from None
    if not isinstance(data, dict):
        raise ModelJSONError(_("{path} must hold a JSON object").format(path=path))
    return data


def find_model_json(model_name_or_path: str, filename: str) -> tuple[Path, dict[str, Any]] | None:
    """The first of the model's ``filename`` that is there (model_file_candidates) with its
    object; None when none is; ModelJSONError when the first one there is malformed."""
    for path in model_file_candidates(model_name_or_path, filename):
        data = read_json_object(path)
        if data is not None:
            return path, data
    return None


def processor_numbers(folder: Path) -> dict[str, Any]:
    """The Processor's own settings in ``folder``'s processor_config.json (LLaVA's patch_size,
    Gemma 3's and InternVL's image_seq_length: ftui.data.media_tokens.fixed_image_tokens); {}
    without one. transformers 5 nests them under "processor" in some saves, older ones keep
    them at the top. A malformed file is ModelJSONError, as the image processor's own is."""
    data = read_json_object(folder / PROCESSOR_CONFIG)
    if data is None:
        return {}
    return {**data, **data["processor"]} if isinstance(data.get("processor"), dict) else data


def model_image_processor(model_name_or_path: str) -> VisionProcessor | None:
    """The model's image processor numbers (ftui.data.media_tokens) from its preprocessor_config.json
    and the processor_config.json beside it; None when it has none; ValueError when either is
    malformed or holds numbers that cannot be (named)."""
    found = find_model_json(model_name_or_path, "preprocessor_config.json")
    if found is None:
        return None
    path, data = found
    return processor_from_config(data, processor_numbers(path.parent))
