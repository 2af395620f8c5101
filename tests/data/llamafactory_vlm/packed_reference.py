"""reference_packed.json: what LLaMA-Factory 0.9.5 makes of ``mllm_demo`` packed
(``make_reference.py --packed`` runs this, in the LLaMA-Factory venv; tests/test_vl_packing.py
reads the stored file and needs no LLaMA-Factory).

For the tiny Qwen2-VL and Qwen3-VL models of tests/vlm_models.py, with ``packing: true`` and
with ``neat_packing: true`` (cutoff_len 512, image_max_pixels 128 * 128, so the 6 records,
103 to 338 tokens each, share 3 rows and none is cut): LLaMA-Factory's
``get_dataset`` (its PackedSupervisedDatasetProcessor: greedy knapsack, each row padded to
cutoff_len), then its ``SFTDataCollatorWith4DAttentionMask`` (``block_diag_attn`` and
``neat_packing`` as its sft workflow sets them, SDPA) with the model on each row alone.

Stored per row: ``examples`` (which records it holds, in order: found by matching the row's
ids against each record's own encoding), ``length`` (its real tokens), input_ids, labels and
the dataset's attention_mask (neat_packing: each example's segment id, 1, 2, ..., padding 0;
packing: all 1) over the whole padded row, image_grid_thw, the collator's position_ids
(4 rows: text, then M-RoPE's temporal, height, width) and a summary of pixel_values.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
DATA = HERE / "data"
CUTOFF, MAX_PIXELS = 512, 128 * 128
CASES = [(family, neat) for family in ("qwen2_vl", "qwen3_vl") for neat in (False, True)]


def _dataset(model_dir: Path, template: str, tmp: Path, **packing):
    from make_reference import llamafactory_module

    from llamafactory.data import get_dataset, get_template_and_fix_tokenizer

    args = dict(model_name_or_path=str(model_dir), stage="sft", do_train=True, finetuning_type="lora", dataset="mllm_demo",
                dataset_dir=str(DATA), cutoff_len=CUTOFF, template=template, image_max_pixels=MAX_PIXELS,
                output_dir=str(tmp / "o"), overwrite_cache=True, report_to="none", cache_dir=str(tmp / "cache"), **packing)
    model_args, data_args, training_args, module = llamafactory_module(model_dir, args)
    template_obj = get_template_and_fix_tokenizer(module["tokenizer"], data_args)
    ds = get_dataset(template_obj, model_args, data_args, training_args, stage="sft", **module)["train_dataset"]
    return ds, template_obj, module


def members(row_ids: list[int], records: list[list[int]]) -> list[int]:
    """The records a packed row holds, in order (each record's ids, end to end, from the start)."""
    out, at, left = [], 0, set(range(len(records)))
    while True:
        hit = next((i for i in sorted(left) if records[i] and row_ids[at:at + len(records[i])] == records[i]), None)
        if hit is None:
            return out
        out.append(hit)
        left.discard(hit)
        at += len(records[hit])


def run_packed_case(family: str, model_dir: Path, model, neat: bool, tmp: Path) -> dict:
    from make_reference import lf_collator, pixel_summary

    sys.path.insert(0, str(ROOT / "tests"))
    from vlm_models import FAMILIES

    template = FAMILIES[family]["template"]
    alone, _t, _m = _dataset(model_dir, template, tmp)
    records = [list(r["input_ids"]) for r in alone]
    ds, template_obj, module = _dataset(model_dir, template, tmp, packing=True, neat_packing=neat)
    collator = lf_collator(template_obj, model, module, block_diag_attn=neat, neat_packing=neat)
    rows = []
    for row in ds:
        feature = dict(row)
        held = members(list(row["input_ids"]), records)
        batch = collator([feature])
        rows.append({
            "examples": held, "length": sum(len(records[i]) for i in held),
            "input_ids": list(row["input_ids"]), "labels": list(row["labels"]), "attention_mask": list(row["attention_mask"]),
            "image_grid_thw": batch["image_grid_thw"].tolist(), "position_ids": batch["position_ids"][:, 0, :].tolist(),
            "pixel_values": pixel_summary(batch["pixel_values"]),
        })
    return {"family": family, "template": template, "cutoff_len": CUTOFF, "image_max_pixels": MAX_PIXELS,
            "neat_packing": neat, "rows": rows}


def main_packed() -> None:
    import transformers
    from make_reference import on_tiny_models

    sys.path.insert(0, str(HERE))
    cases = on_tiny_models([(family, neat) for family, neat in CASES], run_packed_case)
    out = {"transformers": transformers.__version__, "dataset": "mllm_demo", "cases": cases}
    (HERE / "reference_packed.json").write_text(json.dumps(out, separators=(",", ":")) + "\n")
