"""Builds the built-in demo's shipped assets from scripts/demo_records.py.

Writes ftui/presets/demo/dataset.json (alpaca format), the demo tokenizer (a byte-level BPE
trained on that text with the `tokenizers` library, so any input text still tokenizes)
and the tiny Llama config. Run it again only when the records change; its outputs are
committed so that nothing is downloaded or trained at install time.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

from demo_records import QA, QA_WITH_INPUT  # noqa: E402
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers  # noqa: E402
from transformers import PreTrainedTokenizerFast  # noqa: E402

DEMO = ROOT / "ftui" / "presets" / "demo"
VOCAB_SIZE = 640
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHATML = (
    "{% for message in messages %}"
    "{% if loop.first and message['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are the ftui demo assistant.<|im_end|>\\n' }}"
    "{% endif %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def main() -> None:
    records = [{"instruction": q, "input": "", "output": a} for q, a in QA]
    records += [{"instruction": q, "input": i, "output": a} for q, i, a in QA_WITH_INPUT]
    (DEMO / "dataset.json").write_text(json.dumps(records, indent=1, ensure_ascii=False) + "\n")

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    texts = [f"{r['instruction']}\n{r['input']}\n{r['output']}" for r in records]
    texts += ["system\nYou are the ftui demo assistant.\nuser\nassistant\n"] * 20
    tok.train_from_iterator(texts, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
        additional_special_tokens=["<|im_start|>"],
        model_max_length=512,
    )
    fast.chat_template = CHATML
    out = DEMO / "model"
    out.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(out)

    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": len(fast),
        "hidden_size": 128,
        "intermediate_size": 352,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 512,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "tie_word_embeddings": True,
        "bos_token_id": None,
        "eos_token_id": fast.convert_tokens_to_ids("<|im_end|>"),
        "pad_token_id": fast.pad_token_id,
        "hidden_act": "silu",
        "attention_bias": False,
        "mlp_bias": False,
        "torch_dtype": "float32",
    }
    (out / "config.json").write_text(json.dumps(config, indent=1) + "\n")
    # Name the classic class so transformers 4.x reads the files too.
    tc = json.loads((out / "tokenizer_config.json").read_text())
    tc["tokenizer_class"] = "PreTrainedTokenizerFast"
    (out / "tokenizer_config.json").write_text(json.dumps(tc, indent=2) + "\n")
    print(f"{len(records)} records, vocab {len(fast)}")


if __name__ == "__main__":
    main()
