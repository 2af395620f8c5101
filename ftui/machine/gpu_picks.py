"""How a run's ``gpus`` is written: CUDA_VISIBLE_DEVICES text. Apart from ftui.config.schema (its
pydantic model takes a moment to build) so that the launch form reads a pick as it is typed
without importing it on the UI thread."""

from __future__ import annotations

import re
from typing import Any

# nvidia-smi's GPU numbers, or GPU-/MIG- UUID prefixes, separated by commas
GPU_LIST = re.compile(r"\d+(,\d+)*|(GPU|MIG)-[\w-]+(,(GPU|MIG)-[\w-]+)*")


def gpus_as_text(value: Any) -> Any:
    """``gpus`` as CUDA_VISIBLE_DEVICES text: YAML's ``gpus: 1`` and ``gpus: [0, 1]`` mean "1"
    and "0,1"; blanks around commas go; an empty value means unset (an empty
    CUDA_VISIBLE_DEVICES would hide every GPU). Anything else is left for validation to refuse."""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, (list, tuple)) and all(isinstance(v, (int, str)) and not isinstance(v, bool) for v in value):
        value = ",".join(str(v) for v in value)
    if isinstance(value, str):
        return ",".join(part.strip() for part in value.split(",")) if value.strip() else None
    return value
