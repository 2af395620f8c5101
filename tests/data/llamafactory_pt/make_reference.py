"""Regenerates reference.json: what LLaMA-Factory 0.9.5's own pre-training preprocessing
(`stage: pt`) makes of raw-text datasets. Runs only where LLaMA-Factory is installed (a venv of
its own, never ftui's); ftui's tests read the stored reference.json.

    /path/to/lfvenv/bin/python tests/data/llamafactory_pt/make_reference.py [LF_DATA_DIR]

Each case goes through LLaMA-Factory's argument parser (so the `packing` default for pt and
its cutoff_len handling apply), its tokenizer loader, template fix-up and get_dataset.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
LF_DATA = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT.parent / "shared" / "data" / "llamafactory"
TOKENIZERS = {
    "demo": ROOT / "ftui" / "presets" / "demo" / "model",  # no BOS; eos <|im_end|>, pad <|endoftext|>
    "llama": HERE.parent / "llama_tokenizer",  # <s> BOS, </s> EOS, no pad
}
# Documents that test the text reader and the processor at their edges: blank lines, CRLF,
# a lone CR, trailing blanks, a line separator that only str.splitlines() would split on.
EDGE_TEXT = "first line\r\n\r\nthird  line  \n\n\nsixth\rseventh\u2028still seventh\n \nlast without newline"


def rows_digest(rows: list[list[int]]) -> str:
    return hashlib.sha256(json.dumps(rows, separators=(",", ":")).encode()).hexdigest()


def run_case(data_dir: Path, dataset: str, tok: str, cutoff_len: int, packing, *, force_bos=False,
             template=None, batch_size=None) -> dict:
    from llamafactory.data import get_dataset, get_template_and_fix_tokenizer
    from llamafactory.hparams import get_train_args
    from llamafactory.model import load_tokenizer

    out = Path(tempfile.mkdtemp())
    args = dict(
        model_name_or_path=str(TOKENIZERS[tok]), stage="pt", do_train=True, finetuning_type="full",
        dataset=dataset, dataset_dir=str(data_dir), cutoff_len=cutoff_len, output_dir=str(out / "o"),
        overwrite_cache=True, report_to="none", cache_dir=str(out / "cache"),
    )
    if packing is not None:
        args["packing"] = packing
    if template is not None:
        args["template"] = template
    if batch_size is not None:
        args["preprocessing_batch_size"] = batch_size
    model_args, data_args, training_args, _ft, _gen = get_train_args(args)
    module = load_tokenizer(model_args)
    tokenizer = module["tokenizer"]
    if force_bos:  # as transformers 4.x sets it from tokenizer_config.json (5.x drops it, see README)
        tokenizer.add_bos_token = True
    template_obj = get_template_and_fix_tokenizer(tokenizer, data_args)
    ds = get_dataset(template_obj, model_args, data_args, training_args, stage="pt", **module)["train_dataset"]
    rows = [list(r) for r in ds["input_ids"]]
    shutil.rmtree(out, ignore_errors=True)
    return {
        "dataset": dataset, "tokenizer": tok, "force_bos": force_bos, "template": template,
        "cutoff_len": cutoff_len, "packing_setting": packing, "preprocessing_batch_size": batch_size,
        "lf_packing": data_args.packing, "lf_cutoff_len": data_args.cutoff_len,
        "add_bos_token": bool(getattr(tokenizer, "add_bos_token", False)),
        "eos_token": tokenizer.eos_token, "pad_token_id": tokenizer.pad_token_id,
        "examples": len(rows), "lengths_sum": sum(len(r) for r in rows), "sha256": rows_digest(rows),
        "first": rows[:2], "last": rows[-1],
    }


def main() -> None:
    import llamafactory
    import transformers

    data_dir = Path(tempfile.mkdtemp())
    for name in ("c4_demo.jsonl", "wiki_demo.txt"):
        shutil.copy(LF_DATA / name, data_dir / name)
    (data_dir / "edge_demo.txt").write_bytes(EDGE_TEXT.encode())
    info = json.loads((LF_DATA / "dataset_info.json").read_text())
    registry = {k: info[k] for k in ("c4_demo", "wiki_demo")}
    registry["edge_demo"] = {"file_name": "edge_demo.txt", "columns": {"prompt": "text"}}
    (data_dir / "dataset_info.json").write_text(json.dumps(registry))

    cases = []
    for tok, force_bos in (("demo", False), ("llama", False), ("llama", True)):
        for dataset in ("c4_demo", "wiki_demo"):
            for cutoff_len in (128, 300):
                for packing in (None, False, True):
                    cases.append(run_case(data_dir, dataset, tok, cutoff_len, packing, force_bos=force_bos))
        for packing in (None, False):
            cases.append(run_case(data_dir, "edge_demo", tok, 8, packing, force_bos=force_bos))
    cases.append(run_case(data_dir, "c4_demo", "demo", 128, None, batch_size=64))
    cases.append(run_case(data_dir, "c4_demo", "llama", 128, None, force_bos=True, batch_size=64))
    cases.append(run_case(data_dir, "c4_demo", "demo", 128, None, template="llama3"))
    cases.append(run_case(data_dir, "wiki_demo", "demo", 128, False, template="llama3"))
    doc = {
        "made_by": f"llamafactory {llamafactory.__version__}, transformers {transformers.__version__}",
        "edge_text": EDGE_TEXT, "sha256_of": "json.dumps(input_ids rows, separators=(',', ':'))",
        "cases": cases,
    }
    (HERE / "reference.json").write_text(json.dumps(doc, separators=(",", ":")) + "\n")
    shutil.rmtree(data_dir, ignore_errors=True)
    print(len(cases), "cases")


if __name__ == "__main__":
    main()
