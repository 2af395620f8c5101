"""Named chat templates against LLaMA-Factory 0.9.5, token for token (issue 14, items 1-2).

tests/data/llamafactory_templates/reference.json holds what LLaMA-Factory's own supervised
preprocessing made (make_reference.py there) of alpaca_en_demo, identity, the two
glaive_toolcall demos (tool calls) and a multi-turn sharegpt set with system prompts, thinking
blocks and tool calls, at cutoff_len 4096 and 96, for every template in ftui's table, with the
keys that change the encoding (train_on_prompt, mask_history, default_system,
enable_thinking, tool_format), and on a tokenizer lacking the stop words. Each example's
input_ids and labels must hash the same. Pure tokenisation: no model, no LLaMA-Factory.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from ftui.data.chat_template import fix_tokenizer
from ftui.data.conversation import ConversationError, EncodeOptions, Renderer, split_budget
from ftui.presets.templates import TEMPLATES
from ftui.data.dataset_files import read_records
from ftui.data.records import to_conversation
from ftui.data.registry import resolve_datasets
from ftui.data.stage_formats import check_format

ROOT = Path(__file__).resolve().parents[1]
REF_DIR = ROOT / "tests" / "data" / "llamafactory_templates"
DATA = REF_DIR / "data"
REFERENCE = json.loads((REF_DIR / "reference.json").read_text())
FAMILIES = json.loads((REF_DIR / "families.json").read_text())
CASES = REFERENCE["cases"]


def _case_id(case: dict) -> str:
    opts = ",".join(f"{k}={v}" for k, v in case["options"].items())
    return f"{case['template']}-{case['cutoff_len']}" + (f"-{opts}" if opts else "") + ("-bare" if case["bare"] else "")


def family_tokenizer(template: str, bare: bool, tmp: Path):
    """The tokenizer the reference used: the families tokenizer with this family's special
    tokens, or ftui's demo tokenizer (bare: none of the template's stop words)."""
    from transformers import AutoTokenizer

    if bare:
        return AutoTokenizer.from_pretrained(ROOT / "ftui" / "presets" / "demo" / "model")
    fam = FAMILIES[template]
    src = ROOT / "tests" / "data" / "families_tokenizer"
    shutil.copy(src / "tokenizer.json", tmp / "tokenizer.json")
    config = json.loads((src / "tokenizer_config.json").read_text())
    config.update(bos_token=fam["bos"], eos_token=fam["eos"], pad_token=fam["pad"])
    (tmp / "tokenizer_config.json").write_text(json.dumps(config))
    return AutoTokenizer.from_pretrained(tmp)


def conversations():
    out = []
    for spec in resolve_datasets(",".join(REFERENCE["datasets"]), str(DATA)):
        records = read_records(spec)
        check_format(spec, records[0], "sft")
        out += [to_conversation(r, spec, i) for i, r in enumerate(records)]
    return out


CONVERSATIONS = conversations()


def digest(ids: list[int], labels: list[int]) -> str:
    return hashlib.sha256(json.dumps([ids, labels], separators=(",", ":")).encode()).hexdigest()[:16]


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_template_matches_llamafactory(case, tmp_path):
    tok = family_tokenizer(case["template"], case["bare"], tmp_path)
    fix_tokenizer(tok, TEMPLATES[case["template"]])
    assert (len(tok), tok.eos_token) == (case["vocab"], case["eos"]), "stop words / EOS fix-up differs"
    renderer = Renderer(case["template"], tok, EncodeOptions(cutoff_len=case["cutoff_len"], today=REFERENCE["today"], **case["options"]))
    assert all(c is not None for c in CONVERSATIONS)
    got = [renderer.encode(conv) for conv in CONVERSATIONS]
    if case["first"] is not None:
        assert [got[0].input_ids, got[0].labels] == case["first"]
    mismatched = [
        (i, (len(e.input_ids), sum(1 for x in e.labels if x != -100)), tuple(ref[:2]))
        for i, (e, ref) in enumerate(zip(got, case["examples"]))
        if digest(e.input_ids, e.labels) != ref[2]
    ]
    assert len(got) == len(case["examples"])
    assert not mismatched, f"examples differing from LLaMA-Factory (index, ftui (len, labelled), LF): {mismatched[:5]}"


def test_every_template_is_checked():
    assert {c["template"] for c in CASES} == set(TEMPLATES)


def test_split_budget_keeps_short_answer_and_cuts_prompt():
    # The alpaca record of issue 14: a 609-token prompt at cutoff 512 keeps 335 + 177.
    assert split_budget(609, 177, 512) == (335, 177)
    assert split_budget(10, 600, 512) == (10, 502)
    assert split_budget(400, 400, 512) == (256, 256)


def test_a_broken_turn_order_is_skipped_as_llamafactory_does():
    from ftui.data.records import DatasetSpec

    spec = DatasetSpec(name="d", formatting="sharegpt")
    record = {"conversations": [{"from": "human", "value": "a"}, {"from": "human", "value": "b"}, {"from": "gpt", "value": "c"}]}
    assert to_conversation(record, spec, 0) is None


def test_train_on_prompt_with_an_efficient_eos_template_is_refused(tmp_path):
    tok = family_tokenizer("glm4", False, tmp_path)
    with pytest.raises(ConversationError, match="train_on_prompt"):
        Renderer("glm4", tok, EncodeOptions(train_on_prompt=True))


# --- The SFT stage, the config and the tokenizer use the same path

def _answers(tok, ex) -> str:
    return tok.decode([t for t in ex.labels if t != -100])


def _multiturn(tmp_path) -> Path:
    path = tmp_path / "chat.json"
    path.write_text(json.dumps([{"conversations": [
        {"from": "human", "value": "q1"}, {"from": "gpt", "value": "first answer"},
        {"from": "human", "value": "q2"}, {"from": "gpt", "value": "second answer"}]}]))
    return path


@pytest.mark.parametrize("template", ["llama3", None])  # a named template; the tokenizer's own
def test_stage_masks_history_and_trains_on_prompt_as_asked(tmp_path, demo_tokenizer, template):
    from ftui.runner.stages import build_datasets
    from tests.conftest import tiny_config

    def answers(**keys):
        cfg = tiny_config(tmp_path, dataset=str(_multiturn(tmp_path)), template=template, **keys)
        return _answers(demo_tokenizer, build_datasets(cfg, demo_tokenizer).train[0])

    plain = answers()
    assert "first answer" in plain and "second answer" in plain and "q2" not in plain
    last_only = answers(mask_history=True)
    assert "second answer" in last_only and "first answer" not in last_only
    everything = answers(train_on_prompt=True)
    assert "q1" in everything and "q2" in everything


def test_default_system_replaces_the_templates(tmp_path, demo_tokenizer):
    from ftui.runner.stages import build_datasets
    from tests.conftest import tiny_config

    cfg = tiny_config(tmp_path, dataset=str(_multiturn(tmp_path)), template="qwen", default_system="Be a pirate.")
    text = demo_tokenizer.decode(build_datasets(cfg, demo_tokenizer).train[0].input_ids)
    assert text.startswith("<|im_start|>system\nBe a pirate.<|im_end|>\n") and "Qwen" not in text


def test_llama3_adds_its_stop_words_as_tokens_and_the_model_grows_to_fit(tmp_path):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from ftui.runner.model import chat_template_for, grow_embeddings, load_tokenizer
    from tests.conftest import tiny_config

    cfg = tiny_config(tmp_path, template="llama3")
    tok = load_tokenizer(cfg)
    assert tok.eos_token == "<|eot_id|>" and len(tok.encode("<|eom_id|>", add_special_tokens=False)) == 1
    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(ROOT / "ftui" / "presets" / "demo" / "model"))
    assert grow_embeddings(model, tok) > 0 and model.get_input_embeddings().weight.shape[0] >= len(tok)
    with torch.no_grad():
        model(torch.tensor([tok.encode("<|eot_id|>", add_special_tokens=False)]))
    text = tok.apply_chat_template([{"role": "user", "content": "hi"}], chat_template=chat_template_for(cfg, tok), tokenize=False)
    assert text == "<|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"


@pytest.mark.parametrize("keys, field", [
    ({"template": "qwen", "tool_format": "klingon"}, "tool_format"),
    ({"tool_format": "qwen"}, "tool_format"),  # no named template
    ({"template": "qwen", "train_on_prompt": True, "mask_history": True}, "mask_history"),
    ({"template": "glm4", "train_on_prompt": True}, "train_on_prompt"),
])
def test_config_refuses_encoding_keys_that_cannot_work(keys, field):
    from ftui.config.preflight import validate_config

    cfg, problems = validate_config({"model_name_or_path": "m", "dataset": "d", **keys})
    assert cfg is None and any(p.field == field for p in problems), problems


def test_every_llamafactory_official_template_name_used_is_known():
    for name in ("qwen3_nothink", "llama3", "qwen", "gemma3", "deepseekr1", "glm4", "mistral_small", "gpt_oss"):
        assert name in TEMPLATES


@pytest.mark.slow  # CI time: a run of its own for one template's added tokens
def test_a_run_whose_template_added_tokens_loads_for_chat(tmp_path):
    """A base on disk without llama3's stop words: training grows its embeddings; the final
    adapter and a checkpoint load over that base with room for the added tokens. (The one
    test here that trains: two LoRA steps.)"""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from ftui.runner.weights import load_weights, locate
    from tests.conftest import tiny_config, train_sync

    demo = ROOT / "ftui" / "presets" / "demo" / "model"
    base = tmp_path / "base"
    AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(demo)).save_pretrained(base)
    AutoTokenizer.from_pretrained(demo).save_pretrained(base)
    cfg = tiny_config(tmp_path, model_name_or_path=str(base), model_init="pretrained", template="llama3",
                      finetuning_type="lora", max_steps=2, save_steps=1)
    run_dir, _events, proc = train_sync(cfg)
    assert proc.returncode == 0, proc.stderr[-3000:]
    final = AutoTokenizer.from_pretrained(run_dir / "final")
    eot = final.convert_tokens_to_ids("<|eot_id|>")
    assert eot >= 640 and final.eos_token == "<|eot_id|>"
    for which in (None, "latest"):
        model = load_weights(locate(run_dir, cfg, which), cfg, torch.float32)
        with torch.no_grad():
            model(torch.tensor([[eot]]))
