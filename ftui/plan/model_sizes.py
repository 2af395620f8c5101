"""The sizes in a model's config.json, checked before anything computes with them.

config.json is a file from the internet: ``hidden_size: 1e999`` reads as infinity (the
planner's ``int()`` raised OverflowError), ``num_attention_heads: 0`` divides by zero, and
``num_hidden_layers: -1`` made a model of embeddings alone that planned as fitting and
trained to "completed". Every size the planner and the loader read must be a positive whole
number (a JSON integer: not a bool, not 128.0, not "128") and at most MOST_SIZE; one that is
not is refused by name in the form, ``ftui plan`` and ``ftui train``. A size that is absent or
null is left to transformers' default, as the loader does.
"""

from __future__ import annotations

from typing import Any

from ftui.safety.bounded_input import short_repr
from ftui.i18n import _

# What the planner (ftui.plan.model_shape.ModelShape) and the loader (transformers' config classes) read
# as sizes. n_positions: GPT-2-style position tables (cutoff_problems reads it too).
SIZE_KEYS = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
             "num_key_value_heads", "head_dim", "max_position_embeddings", "n_positions")
# The largest size accepted: torch indexes tensors with 64-bit integers, but no model has a
# dimension near 2**31 (the largest vocabularies are about 2**18, context windows 2**24), and
# under this bound the planner's products of sizes stay far inside a float (its GiB figures).
MOST_SIZE = 2**31 - 1


def size_problems(model: dict[str, Any]) -> list[str]:
    """One message per size key of ``model`` (a config.json as a dict, and its text_config:
    a multimodal config nests the language model there) that is not a positive whole number
    up to MOST_SIZE, e.g. ``config.json: num_attention_heads must be a positive whole number, got 0``."""
    out: list[str] = []
    parts = [model] + ([model["text_config"]] if isinstance(model.get("text_config"), dict) else [])
    for part in parts:
        for key in SIZE_KEYS:
            value = part.get(key)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                out.append(_("config.json: {key} must be a positive whole number, got {value}").format(key=key, value=short_repr(value)))
            elif value > MOST_SIZE:
                out.append(_("config.json: {key} must be a positive whole number up to {most}, got {value}").format(
                    key=key, most=MOST_SIZE, value=short_repr(value)))
    return out
