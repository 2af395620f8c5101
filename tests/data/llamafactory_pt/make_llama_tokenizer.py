"""Trains tests/data/llama_tokenizer: a tiny Llama-2-style tokenizer (BPE, byte fallback,
Metaspace, <s> BOS, </s> EOS, no pad) for the pre-training reference. Needs only `tokenizers`."""
import json, sys
from pathlib import Path
from tokenizers import Tokenizer, models, pre_tokenizers, decoders, trainers, processors

HERE = Path(__file__).resolve().parent
out = HERE.parent / "llama_tokenizer"
out.mkdir(exist_ok=True)
src = Path(sys.argv[1]) if len(sys.argv) > 1 else HERE.parents[3] / "shared" / "data" / "llamafactory"
texts = [json.loads(l)["text"] for l in (src / "c4_demo.jsonl").read_text().splitlines()[:100]]
tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
tok.normalizer = None
tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=False)
tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)])
bytes_ = [f"<0x{i:02X}>" for i in range(256)]
trainer = trainers.BpeTrainer(vocab_size=3 + 256 + 200, special_tokens=["<unk>", "<s>", "</s>"] + bytes_, initial_alphabet=[], limit_alphabet=60, show_progress=False)
tok.train_from_iterator(texts, trainer)
tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", 1)])
tok.save(str(out / "tokenizer.json"))
(out / "tokenizer_config.json").write_text(json.dumps({
    "tokenizer_class": "LlamaTokenizer", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
    "add_bos_token": True, "add_eos_token": False, "model_max_length": 4096, "legacy": False,
}, indent=2) + "\n")
print(tok.get_vocab_size())
