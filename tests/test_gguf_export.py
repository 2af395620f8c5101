"""GGUF export (issue 17): tiny random Llama / Qwen2 / Qwen3 models saved with save_pretrained,
written with ftui.runner.gguf_export and read back with gguf's own reader: tensor names, shapes
and storage types, the metadata llama.cpp reads, the tokenizer and chat template, and every
tensor's values against the HF weights (to f16 / bf16 rounding, q8_0 to its block error)."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import gguf
import numpy as np
import pytest
import torch

from ftui.runner.gguf_export import GGUF_ARCHES, GGUFError, gguf_file_name, write_gguf

ROOT = Path(__file__).resolve().parents[1]
DEMO_TOKENIZER = ROOT / "ftui" / "presets" / "demo" / "model"
LLAMA_TOKENIZER = ROOT / "tests" / "data" / "llama_tokenizer"
OUTTYPES = ("f16", "bf16", "q8_0")
CHAT_TEMPLATE = "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"

# llama.cpp's tensor names, written out here (not taken from gguf's TensorNameMap) so the test
# checks the mapping instead of repeating it.
HF_TO_GGUF = {
    "model.embed_tokens.weight": "token_embd.weight",
    "model.norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",
    "input_layernorm.weight": "attn_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "self_attn.q_proj.bias": "attn_q.bias",
    "self_attn.k_proj.bias": "attn_k.bias",
    "self_attn.v_proj.bias": "attn_v.bias",
    "self_attn.q_norm.weight": "attn_q_norm.weight",
    "self_attn.k_norm.weight": "attn_k_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}


def gguf_name(hf_name: str) -> str:
    if m := re.fullmatch(r"model\.layers\.(\d+)\.(.+)", hf_name):
        return f"blk.{m[1]}.{HF_TO_GGUF[m[2]]}"
    return HF_TO_GGUF[hf_name]


def qwen2_style_tokenizer(out: Path) -> None:
    """A small byte-level BPE trained here with Qwen2's pre-tokenizer (Split regex + ByteLevel)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from ftui.runner.gguf_export import _QWEN2_REGEX

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(_QWEN2_REGEX), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=320,
        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    text = ["The quick brown fox jumps over the lazy dog. 12345 tokens, said the model!"] * 20
    tok.train_from_iterator(text, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>", bos_token=None
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)


def save_model(out: Path, model_type: str, tokenizer: str, tied: bool, **overrides) -> Path:
    """A tiny random model of `model_type` with a tokenizer and chat template, as save_pretrained
    writes it. intermediate_size 80 leaves ffn_down rows that q8_0 cannot block (f16 fallback)."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    out.mkdir(parents=True)
    if tokenizer == "qwen2":
        qwen2_style_tokenizer(out)
    else:
        src = DEMO_TOKENIZER if tokenizer == "demo" else LLAMA_TOKENIZER
        tok = AutoTokenizer.from_pretrained(src)
        tok.chat_template = CHAT_TEMPLATE
        tok.save_pretrained(out)
    tok = AutoTokenizer.from_pretrained(out)
    params = dict(
        vocab_size=len(tok),
        hidden_size=64,
        intermediate_size=80,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        tie_word_embeddings=tied,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
    )
    params.update(overrides)
    config = AutoConfig.for_model(model_type, **params)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config)
    with torch.no_grad():  # norms are ones at init: random values make their check meaningful
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.normal_()
    model.save_pretrained(out)
    return out


MODELS = {
    # Llama with ftui's demo tokenizer (byte-level BPE, GPT-2 splitting), tied embeddings
    "llama_tied": ("llama", "demo", True, {}),
    # Llama with a SentencePiece-style tokenizer, untied, vocab padded past the tokenizer's
    "llama_spm": ("llama", "llama", False, {"vocab_size": 480}),
    # Mistral: written as a Llama (llama.cpp's converter does the same)
    "mistral": ("mistral", "llama", False, {}),
    # Qwen2 (q/k/v biases) with a Qwen2-splitting tokenizer, untied
    "qwen2": ("qwen2", "qwen2", False, {}),
    # Qwen3 (q_norm/k_norm, head_dim != hidden/heads), tied
    "qwen3": ("qwen3", "demo", True, {"head_dim": 32}),
}


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("gguf_models")
    return {key: save_model(root / key, mt, tok, tied, **kw) for key, (mt, tok, tied, kw) in MODELS.items()}


def hf_tensors(model_dir: Path) -> dict[str, np.ndarray]:
    from safetensors.torch import load_file

    out = {}
    for f in sorted(model_dir.glob("*.safetensors")):
        out.update({k: v.float().numpy() for k, v in load_file(f).items()})
    return out


def field(reader: gguf.GGUFReader, key: str):
    f = reader.get_field(key)
    return None if f is None else f.contents()


def unpermute(w: np.ndarray, n_head: int) -> np.ndarray:
    """Undo llama.cpp's q/k row permutation (interleaved rotary halves back to HF's split)."""
    return w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def expected_type(name: str, shape: tuple, outtype: str) -> gguf.GGMLQuantizationType:
    if len(shape) == 1 or name.endswith("_norm.weight"):
        return gguf.GGMLQuantizationType.F32
    if outtype == "q8_0" and shape[-1] % 32:
        return gguf.GGMLQuantizationType.F16
    return gguf.GGMLQuantizationType[outtype.upper()]


def check_values(hf: np.ndarray, got: np.ndarray, qtype: gguf.GGMLQuantizationType) -> None:
    if qtype == gguf.GGMLQuantizationType.F32:
        np.testing.assert_array_equal(got, hf)
    elif qtype == gguf.GGMLQuantizationType.F16:
        np.testing.assert_array_equal(got, hf.astype(np.float16).astype(np.float32))
    elif qtype == gguf.GGMLQuantizationType.BF16:
        np.testing.assert_array_equal(got, torch.from_numpy(hf).bfloat16().float().numpy())
    else:  # q8_0: 32-value blocks, scale amax/127 (stored in f16): error at most about half a step
        blocks, got_blocks = hf.reshape(-1, 32), got.reshape(-1, 32)
        step = np.abs(blocks).max(axis=1, keepdims=True) / 127
        assert np.all(np.abs(got_blocks - blocks) <= 0.51 * step + 1e-3 * np.abs(blocks) + 1e-8)


@pytest.mark.parametrize("outtype", OUTTYPES)
@pytest.mark.parametrize("key", list(MODELS))
def test_gguf_reads_back_as_the_hf_model(models, tmp_path, key, outtype):
    from transformers import AutoTokenizer

    model_dir = models[key]
    config = json.loads((model_dir / "config.json").read_text())
    out = tmp_path / gguf_file_name(model_dir, outtype)
    seen = []
    result = write_gguf(model_dir, out, outtype, progress=lambda d, t: seen.append((d, t)))

    hf = hf_tensors(model_dir)
    if config["tie_word_embeddings"]:
        hf.pop("lm_head.weight", None)
    reader = gguf.GGUFReader(out)
    tensors = {t.name: t for t in reader.tensors}
    arch = GGUF_ARCHES[config["model_type"]]
    assert result == {"file": out.name, "bytes": out.stat().st_size, "tensors": len(hf), "arch": arch}
    assert seen == [(i, len(hf)) for i in range(1, len(hf) + 1)]
    assert not list(tmp_path.glob("*.partial"))
    assert sorted(tensors) == sorted(gguf_name(n) for n in hf)
    assert ("output.weight" in tensors) == (not config["tie_word_embeddings"])

    n_head, n_kv = config["num_attention_heads"], config["num_key_value_heads"]
    for hf_name, value in hf.items():
        t = tensors[gguf_name(hf_name)]
        assert tuple(int(d) for d in reversed(t.shape)) == value.shape, hf_name
        assert t.tensor_type == expected_type(t.name, value.shape, outtype), hf_name
        got = gguf.quants.dequantize(t.data, t.tensor_type).reshape(value.shape)
        if arch == "llama" and "q_proj" in hf_name:
            got = unpermute(got, n_head)
        if arch == "llama" and "k_proj" in hf_name:
            got = unpermute(got, n_kv)
        check_values(value, got, t.tensor_type)

    tok = AutoTokenizer.from_pretrained(model_dir)
    assert field(reader, "general.architecture") == arch
    assert field(reader, f"{arch}.block_count") == config["num_hidden_layers"]
    assert field(reader, f"{arch}.context_length") == config["max_position_embeddings"]
    assert field(reader, f"{arch}.embedding_length") == config["hidden_size"]
    assert field(reader, f"{arch}.feed_forward_length") == config["intermediate_size"]
    assert field(reader, f"{arch}.attention.head_count") == n_head
    assert field(reader, f"{arch}.attention.head_count_kv") == n_kv
    assert field(reader, f"{arch}.rope.freq_base") == 10000.0
    assert field(reader, f"{arch}.attention.layer_norm_rms_epsilon") == pytest.approx(config["rms_norm_eps"])
    assert field(reader, f"{arch}.rope.dimension_count") == (config.get("head_dim") or 16)
    assert field(reader, "general.file_type") == gguf.LlamaFileType[f"MOSTLY_{outtype.upper()}"]
    tokens = field(reader, "tokenizer.ggml.tokens")
    assert len(tokens) == config["vocab_size"] == hf["model.embed_tokens.weight"].shape[0]
    assert field(reader, "tokenizer.ggml.bos_token_id") == tok.bos_token_id
    assert field(reader, "tokenizer.ggml.eos_token_id") == tok.eos_token_id
    assert field(reader, "tokenizer.chat_template") == tok.chat_template == CHAT_TEMPLATE
    vocab = tok.get_vocab()
    assert all(tokens[i] == t for t, i in vocab.items())
    if MODELS[key][1] == "llama":
        assert field(reader, "tokenizer.ggml.model") == "llama"
        types = field(reader, "tokenizer.ggml.token_type")
        assert types[vocab["<0x41>"]] == gguf.TokenType.BYTE
        assert types[vocab["</s>"]] == gguf.TokenType.CONTROL
        # llama.cpp's SPM tokenizer merges the best-scoring pair first: scores follow merge order
        scores = field(reader, "tokenizer.ggml.scores")
        normal = [i for i, t in enumerate(types) if t == gguf.TokenType.NORMAL]
        assert len(normal) > 100 and all(scores[i] == -i for i in normal)
        if config["vocab_size"] > len(tok):  # padded past the tokenizer
            assert tokens[-1] == f"[PAD{config['vocab_size'] - 1}]" and types[-1] == gguf.TokenType.UNUSED
    else:
        assert field(reader, "tokenizer.ggml.model") == "gpt2"
        assert field(reader, "tokenizer.ggml.pre") == ("qwen2" if MODELS[key][1] == "qwen2" else "gpt-2")
        merges = json.loads((model_dir / "tokenizer.json").read_text())["model"]["merges"]
        assert len(field(reader, "tokenizer.ggml.merges")) == len(merges) > 0
        types = field(reader, "tokenizer.ggml.token_type")
        assert types[vocab["<|im_end|>"]] == gguf.TokenType.CONTROL
        assert types[vocab["a"]] == gguf.TokenType.NORMAL
    if "head_dim" in MODELS[key][3]:
        assert field(reader, f"{arch}.attention.key_length") == 32
    if tok.bos_token_id is None:  # else llama.cpp would keep its own default BOS id
        assert field(reader, "tokenizer.ggml.add_bos_token") is False


def test_sharded_model_directory(models, tmp_path):
    """save_pretrained's sharded form (index + several files) gives the same tensors."""
    from transformers import AutoModelForCausalLM

    sharded = tmp_path / "sharded"
    shutil.copytree(models["qwen2"], sharded)
    (sharded / "model.safetensors").unlink()
    AutoModelForCausalLM.from_pretrained(models["qwen2"]).save_pretrained(sharded, max_shard_size="100KB")
    assert (sharded / "model.safetensors.index.json").is_file() and len(list(sharded.glob("*.safetensors"))) > 1
    one = write_gguf(models["qwen2"], tmp_path / "one.gguf", "f16")
    many = write_gguf(sharded, tmp_path / "many.gguf", "f16")
    assert many["tensors"] == one["tensors"]
    a, b = gguf.GGUFReader(tmp_path / "one.gguf"), gguf.GGUFReader(tmp_path / "many.gguf")
    by_name = {t.name: t for t in b.tensors}
    for t in a.tensors:
        np.testing.assert_array_equal(t.data, by_name[t.name].data)


def test_llama3_rope_scaling_writes_rope_freqs(tmp_path):
    """Llama 3.1's rope scaling: llama.cpp reads the per-frequency factors from rope_freqs.weight;
    they equal the inverse of transformers' own llama3 frequency scaling."""
    from transformers import AutoConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    scaling = {
        "rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
        "high_freq_factor": 4.0, "original_max_position_embeddings": 64,
    }
    model_dir = save_model(tmp_path / "llama31", "llama", "demo", True, rope_parameters=scaling, max_position_embeddings=512)
    write_gguf(model_dir, tmp_path / "x.gguf", "f16")
    reader = gguf.GGUFReader(tmp_path / "x.gguf")
    factors = {t.name: t for t in reader.tensors}["rope_freqs.weight"].data
    assert field(reader, "llama.rope.freq_base") == 500000.0
    config = AutoConfig.from_pretrained(model_dir)
    scaled, _ = ROPE_INIT_FUNCTIONS["llama3"](config, "cpu")
    plain = 1.0 / (500000.0 ** (torch.arange(0, 16, 2, dtype=torch.float32) / 16))
    np.testing.assert_allclose(factors, (plain / scaled).numpy(), rtol=1e-5)


@pytest.mark.parametrize("model_type", ["gpt2", "gemma"])
def test_unsupported_model_type_is_refused_by_name(tmp_path, model_type):
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.for_model(
        model_type, vocab_size=640, hidden_size=64, n_embd=64, n_layer=1, n_head=4,
        num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=1, head_dim=16, intermediate_size=64,
    )
    AutoModelForCausalLM.from_config(config).save_pretrained(tmp_path / "m")
    shutil.copy(DEMO_TOKENIZER / "tokenizer.json", tmp_path / "m")
    with pytest.raises(GGUFError, match=f"model_type '{model_type}'.*llama, mistral, qwen2, qwen3"):
        write_gguf(tmp_path / "m", tmp_path / "m.gguf", "q8_0")
    assert list(tmp_path.glob("*.gguf*")) == []


def test_user_errors_say_what_to_do(models, tmp_path):
    with pytest.raises(GGUFError, match="f16, bf16, q8_0"):
        write_gguf(models["qwen3"], tmp_path / "x.gguf", "q4_k")
    with pytest.raises(GGUFError, match="no config.json"):
        write_gguf(tmp_path, tmp_path / "x.gguf", "f16")
    with pytest.raises(GGUFError, match="writing .* failed.*directory exists"):
        write_gguf(models["qwen3"], tmp_path / "no" / "such" / "x.gguf", "f16")
    bare = tmp_path / "bare"
    shutil.copytree(models["qwen3"], bare)
    (bare / "tokenizer.json").unlink()
    with pytest.raises(GGUFError, match="no tokenizer.json"):
        write_gguf(bare, tmp_path / "x.gguf", "f16")
    assert list(tmp_path.glob("*.gguf*")) == []


def test_missing_gguf_package_says_how_to_install(models, tmp_path, monkeypatch):
    import ftui.runner.gguf_export as gguf_export

    monkeypatch.setattr(gguf_export, "gguf", None)
    with pytest.raises(GGUFError, match=r"pip install 'ftui\[gguf\]'"):
        write_gguf(models["qwen3"], tmp_path / "x.gguf", "f16")


@pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None, reason="needs llama-cpp-python to load the GGUF in llama.cpp; not a test dependency (CI has none)")
def test_llama_cpp_runs_the_export_of_the_trained_demo(demo_run):
    """A real runtime: llama.cpp loads the GGUF of the trained demo, tokenizes the chat prompt
    as the HF tokenizer does and answers what transformers answers (bench/gguf_llamacpp_check.py)."""
    cmd = [sys.executable, str(ROOT / "bench" / "gguf_llamacpp_check.py"), str(demo_run / "final"), "--quick"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout)
    f16 = result["types"]["f16"]
    assert f16["same_prompt_ids"] and f16["same_chat_template"]
    assert f16["same_greedy_answer"], (f16["llama_cpp_answer"], result["hf_answer"])
    assert f16["max_abs_logit_diff"] < 0.05 * f16["max_abs_logit"]


def test_vocab_size_that_disagrees_with_the_embeddings_is_refused(models, tmp_path):
    """llama.cpp sizes the token list from the embeddings: a config that says otherwise is an error."""
    broken = tmp_path / "broken"
    shutil.copytree(models["qwen3"], broken)
    config = json.loads((broken / "config.json").read_text())
    (broken / "config.json").write_text(json.dumps({**config, "vocab_size": config["vocab_size"] + 64}))
    with pytest.raises(GGUFError, match="vocab_size"):
        write_gguf(broken, tmp_path / "x.gguf", "f16")
    assert list(tmp_path.glob("*.gguf*")) == []
