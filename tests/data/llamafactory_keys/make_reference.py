"""Writes ftui/presets/llamafactory_keys.json: every key LLaMA-Factory 0.9.5 reads from a training
YAML (its ModelArguments, DataArguments, FinetuningArguments, GeneratingArguments and
TrainingArguments) with its default value, so ftui can tell a key set to its no-op default
from one that asks for something. Runs only where LLaMA-Factory is installed:

    /work/lfvenv/bin/python tests/data/llamafactory_keys/make_reference.py
"""

import dataclasses
import json
from pathlib import Path

from llamafactory.hparams import DataArguments, FinetuningArguments, GeneratingArguments, ModelArguments, TrainingArguments


def plain(value):
    if value is dataclasses.MISSING:
        return None
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if hasattr(value, "value"):  # enums
        return value.value
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    return str(value)


keys = {}
for cls in (ModelArguments, DataArguments, FinetuningArguments, GeneratingArguments, TrainingArguments):
    for f in dataclasses.fields(cls):
        if f.init and f.name not in keys:
            default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
            keys[f.name] = plain(default)
out = Path(__file__).resolve().parents[3] / "ftui" / "presets" / "llamafactory_keys.json"
out.write_text(json.dumps({"version": "0.9.5", "defaults": keys}, indent=0, sort_keys=True) + "\n")
print(f"{len(keys)} keys -> {out}")
