"""Writes tests/data/families_tokenizer: ftui's demo tokenizer (byte-level BPE, 640 tokens, so
any text encodes) plus the special tokens of every chat-template family, so each template's
markers are single tokens as in the real models. BOS / EOS / PAD are set per family by
``family_tokenizer`` in tests/test_templates.py (and make_reference.py). Needs only `tokenizers`."""
import json
from pathlib import Path

from tokenizers import AddedToken, Tokenizer

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
OUT = HERE.parent / "families_tokenizer"
SPECIAL = [
    "<s>", "</s>", "<unk>", "<bos>", "<eos>", "<pad>",
    "<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<|eom_id|>",
    "<|header_start|>", "<|header_end|>", "<|eot|>", "<|eom|>",
    "[INST]", "[/INST]", "[TOOL_CALLS]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]", "[TOOL_RESULTS]", "[/TOOL_RESULTS]",
    "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]",
    "<start_of_turn>", "<end_of_turn>",
    "<|system|>", "<|user|>", "<|assistant|>", "<|end|>", "<|observation|>", "[gMASK]", "sop", "<sop>",
    "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>",
    "<|im_sep|>", "<|startoftext|>", "<|start|>", "<|message|>", "<|channel|>", "<|return|>",
]
# Not special in the real models either: plain added tokens.
ADDED = ["<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]

tok = Tokenizer.from_file(str(ROOT / "ftui" / "presets" / "demo" / "model" / "tokenizer.json"))
tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL])
tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in ADDED])
OUT.mkdir(exist_ok=True)
tok.save(str(OUT / "tokenizer.json"))
(OUT / "tokenizer_config.json").write_text(json.dumps({
    "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": None, "eos_token": "<|endoftext|>",
    "pad_token": None, "unk_token": None, "model_max_length": 1000000,
}, indent=2) + "\n")
print(tok.get_vocab_size())
