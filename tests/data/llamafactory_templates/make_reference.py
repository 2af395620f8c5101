"""Regenerates reference.json: what LLaMA-Factory 0.9.5's own supervised preprocessing
(`stage: sft`: its template, tokenizer fix-up and get_dataset) makes of five small datasets
with every template ftui has. Runs only where LLaMA-Factory is installed (a venv of its own,
never ftui's; see ../llamafactory_pt/README.md for the install); tests/test_templates.py reads
the stored reference.json and needs no LLaMA-Factory.

    /path/to/lfvenv/bin/python tests/data/llamafactory_templates/make_reference.py [LF_DATA_DIR] [--only T1,T2]

``--only``: runs the plain cases of those templates alone and puts them into the stored
reference.json in place of any earlier ones (a template added to ftui's table; the other cases
are kept as they were made).

First it writes data/: the first records of LLaMA-Factory's alpaca_en_demo, identity,
glaive_toolcall_en_demo and glaive_toolcall_zh_demo, and multiturn_demo.json (multi-turn
sharegpt with a system prompt, thinking blocks and tool calls; written by hand, kept), with a
dataset_info.json.
Tokenizers: tests/data/families_tokenizer with each family's BOS / EOS / PAD (families.json),
and, for a few templates, ftui's demo tokenizer, which lacks their stop words (so LLaMA-Factory
adds them). llama3's tool prompt carries a date: fixed to TODAY here and in the test.
"""

from __future__ import annotations

import copy
import hashlib
import json
import shutil
import sys
import tempfile
from datetime import datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
ONLY = sys.argv[sys.argv.index("--only") + 1].split(",") if "--only" in sys.argv else None
ARGS = [a for a in sys.argv[1:] if a != "--only" and (ONLY is None or a != ",".join(ONLY))]
LF_DATA = Path(ARGS[0]) if ARGS else ROOT.parent / "shared" / "data" / "llamafactory"
DATA = HERE / "data"
FIRST = {"alpaca_en_demo": 30, "identity": 30, "glaive_toolcall_en_demo": 20, "glaive_toolcall_zh_demo": 20}
DATASETS = list(FIRST) + ["multiturn_demo"]
CUTOFFS = (4096, 96)
TODAY = "26 Jul 2024"
# (template, options) beyond the plain runs: the keys that change the encoding.
OPTION_CASES = [
    ("qwen", {"train_on_prompt": True}), ("llama3", {"train_on_prompt": True}),
    ("qwen", {"mask_history": True}), ("llama3", {"mask_history": True}), ("qwen3", {"mask_history": True}),
    ("gemma2", {"mask_history": True}), ("chatglm3", {"mask_history": True}),
    ("qwen", {"default_system": "You are a test."}), ("llama2", {"default_system": "Be brief."}),
    ("qwen3", {"enable_thinking": False}), ("deepseekr1", {"enable_thinking": False}), ("gpt_oss", {"enable_thinking": False}),
    ("qwen3_5", {"enable_thinking": False}),
    ("qwen", {"tool_format": "llama3"}), ("llama3", {"tool_format": "qwen"}), ("chatml", {"tool_format": "qwen"}),
    ("glm4", {"tool_format": "default"}), ("gemma", {"tool_format": "mistral"}),
]
# Templates also run on ftui's demo tokenizer, which has none of their stop words.
BARE = ["llama3", "gemma", "phi", "llama4", "chatml"]
PRISTINE: dict = {}  # LLaMA-Factory's templates as registered, before any case changed them


def digest(ids: list[int], labels: list[int]) -> str:
    return hashlib.sha256(json.dumps([ids, labels], separators=(",", ":")).encode()).hexdigest()[:16]


def write_data() -> None:
    DATA.mkdir(exist_ok=True)
    info = json.loads((LF_DATA / "dataset_info.json").read_text())
    registry = {}
    for name, n in FIRST.items():
        entry = info[name]
        records = json.loads((LF_DATA / entry["file_name"]).read_text())[:n]
        (DATA / entry["file_name"]).write_text(json.dumps(records, ensure_ascii=False, indent=0) + "\n")
        registry[name] = entry
    # data/multiturn_demo.json is written by hand (kept in place).
    registry["multiturn_demo"] = {"file_name": "multiturn_demo.json", "formatting": "sharegpt",
                                  "columns": {"messages": "conversations", "system": "system", "tools": "tools"}}
    (DATA / "dataset_info.json").write_text(json.dumps(registry, indent=2) + "\n")


def tokenizer_dir(family: dict | None, tmp: Path) -> Path:
    """A tokenizer directory: the families tokenizer with this family's special tokens, or
    (family None) ftui's demo tokenizer."""
    if family is None:
        return ROOT / "ftui" / "presets" / "demo" / "model"
    out = tmp / ("tok-" + hashlib.sha256(json.dumps(family).encode()).hexdigest()[:12])
    if not out.is_dir():
        out.mkdir()
        src = ROOT / "tests" / "data" / "families_tokenizer"
        shutil.copy(src / "tokenizer.json", out / "tokenizer.json")
        config = json.loads((src / "tokenizer_config.json").read_text())
        config.update(bos_token=family["bos"], eos_token=family["eos"], pad_token=family["pad"])
        (out / "tokenizer_config.json").write_text(json.dumps(config))
    return out


def run_case(template: str, cutoff: int, options: dict, tok_dir: Path, tmp: Path) -> dict:
    from llamafactory.data import get_dataset, get_template_and_fix_tokenizer
    from llamafactory.data.mm_plugin import get_mm_plugin
    from llamafactory.hparams import get_train_args
    from llamafactory.model import load_tokenizer

    import llamafactory.data.template as lf_template

    # get_template_and_fix_tokenizer changes the registered template in place (tool_format,
    # default_system): each case starts from a copy of it as registered.
    PRISTINE.setdefault(template, copy.deepcopy(lf_template.TEMPLATES[template]))
    lf_template.TEMPLATES[template] = copy.deepcopy(PRISTINE[template])
    args = dict(
        model_name_or_path=str(tok_dir), stage="sft", do_train=True, finetuning_type="full",
        dataset=",".join(DATASETS), dataset_dir=str(DATA), cutoff_len=cutoff, template=template,
        output_dir=str(tmp / "o"), overwrite_cache=True, report_to="none", cache_dir=str(tmp / "cache"), **options,
    )
    model_args, data_args, training_args, _ft, _gen = get_train_args(args)
    module = load_tokenizer(model_args)
    tokenizer = module["tokenizer"]
    template_obj = get_template_and_fix_tokenizer(tokenizer, data_args)
    # gemma3, llama4, mistral_small and qwen3_5 carry a multimodal plugin that demands an image
    # processor even for text; the text-only plugin renders text the same way.
    template_obj.mm_plugin = get_mm_plugin(name="base")
    ds = get_dataset(template_obj, model_args, data_args, training_args, stage="sft", **module)["train_dataset"]
    rows = [(list(r["input_ids"]), list(r["labels"])) for r in ds]
    return {
        "template": template, "cutoff_len": cutoff, "options": options, "bare": tok_dir.name == "model",
        "vocab": len(tokenizer), "eos": tokenizer.eos_token,
        "examples": [[len(ids), sum(1 for x in labels if x != -100), digest(ids, labels)] for ids, labels in rows],
        # The first example in full where it is short (to show a difference), else its hash only.
        "first": [rows[0][0], rows[0][1]] if rows and cutoff <= 128 else None,
    }


def main() -> None:
    import llamafactory.data.tool_utils as tool_utils

    class FixedDate(datetime):
        @classmethod
        def now(cls, tz=None):  # noqa: D102 (llama3's tool prompt date)
            return datetime.strptime(TODAY, "%d %b %Y")

    tool_utils.datetime = FixedDate
    write_data()
    families = json.loads((HERE / "families.json").read_text())
    cases = []
    tmp = Path(tempfile.mkdtemp())
    try:
        plan = [(t, c, {}, families[t]) for t in families for c in CUTOFFS]
        plan += [(t, c, o, families[t]) for t, o in OPTION_CASES for c in CUTOFFS]
        plan += [(t, c, {}, None) for t in BARE for c in CUTOFFS]
        if ONLY is not None:
            plan = [(t, c, {}, families[t]) for t in ONLY for c in CUTOFFS]
            kept = json.loads((HERE / "reference.json").read_text())["cases"]
            cases = [case for case in kept if case["template"] not in ONLY]
        for template, cutoff, options, family in plan:
            case = run_case(template, cutoff, options, tokenizer_dir(family, tmp), tmp)
            print(template, cutoff, options, family is None, len(case["examples"]), file=sys.stderr)
            cases.append(case)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    (HERE / "reference.json").write_text(json.dumps({"datasets": DATASETS, "today": TODAY, "cases": cases}, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    main()
