"""GGUF export of a standalone Hugging Face model directory (what `save_pretrained` writes).

The conversion follows llama.cpp's own converter (convert_hf_to_gguf.py) for the Llama and
Qwen2/Qwen3 families, written with the `gguf` package (llama.cpp's writer): the same metadata
keys, tensor names (gguf's TensorNameMap), the Llama q/k row permutation, F32 norms and 1-D
tensors, q8_0 only where a row splits into 32-value blocks (else f16, as the converter falls
back), and the tokenizer as "gpt2" (byte-level BPE) or "llama" (SentencePiece-style BPE).

A vision-language model is refused by name: llama.cpp runs one from the language model's GGUF
plus a projector file (mmproj) for the vision tower, which this writer does not make (its
convert_hf_to_gguf.py --mmproj does, from the merged export).

Memory: tensors are read one at a time with safetensors' `safe_open` and streamed into the file
(the tensor table is written first from the shapes alone), so a 7B export never holds the model.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import torch
from safetensors import safe_open

from ftui.i18n import _
from ftui.presets.vision_families import vision_family

try:
    import gguf
except ImportError:  # the optional `gguf` extra; write_gguf says how to install it
    gguf = None

GGUF_ARCHES: dict[str, str] = {"llama": "llama", "mistral": "llama", "qwen2": "qwen2", "qwen3": "qwen3"}
"""config.json model_type -> GGUF architecture name (llama.cpp's; its converter writes Mistral
as a Llama: same tensors, same q/k permutation)."""

OUTTYPES = ("f16", "bf16", "q8_0")
"""The GGUF types ftui writes (outtype -> GGMLQuantizationType[upper], LlamaFileType MOSTLY_<upper>)."""

# Pre-tokenizer regexes of byte-level BPE tokenizers (tokenizer.json's Split pattern) and the
# name llama.cpp gives the same splitting; llama.cpp tokenizes with its own copy of the regex,
# so an unknown one is refused instead of being written under a wrong name.
_QWEN2_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_LLAMA3_REGEX = _QWEN2_REGEX.replace(r"|\p{N}|", r"|\p{N}{1,3}|")
PRE_TOKENIZERS = {_QWEN2_REGEX: "qwen2", _LLAMA3_REGEX: "llama-bpe"}

# The rope types whose GGUF form llama.cpp reads (metadata, or llama3's rope_freqs tensor).
_ROPE_TYPES = ("default", "linear", "yarn", "llama3")


class GGUFError(Exception):
    """A model directory that cannot be written as GGUF; the message says why and what to do."""


def gguf_file_name(model_dir: Path, outtype: str) -> str:
    """The file name llama.cpp users expect: `<model dir name>-<outtype>.gguf`."""
    return f"{Path(model_dir).resolve().name}-{outtype}.gguf"


@dataclass
class _Planned:
    """One output tensor: where its values come from and how it is stored."""

    hf_name: str | None  # None: computed here (llama3 rope factors)
    name: str
    shape: tuple[int, ...]
    qtype: gguf.GGMLQuantizationType
    values: np.ndarray | None = None


def write_gguf(
    model_dir: Path,
    out_file: Path,
    outtype: str,
    progress: Callable[[int, int], None] | None = None,
) -> dict:
    """Write `model_dir` as one GGUF file at `out_file` (via a temporary name, renamed at the end).

    Returns {"file", "bytes", "tensors", "arch"}; calls progress(done, total) after each tensor.
    """
    model_dir, out_file = Path(model_dir), Path(out_file)
    if gguf is None:
        raise GGUFError(_("GGUF export needs the gguf package: pip install 'ftui[gguf]' (or pip install gguf)"))
    if outtype not in OUTTYPES:
        raise GGUFError(_("GGUF type {type} is not supported; use one of: {types}").format(type=repr(outtype), types=", ".join(OUTTYPES)))
    config = _read_config(model_dir)
    arch = _gguf_arch(config)
    shards = _weight_files(model_dir)
    plan = _plan_tensors(config, arch, shards, outtype)
    tmp = out_file.with_name(out_file.name + ".partial")
    writer = gguf.GGUFWriter(tmp, arch)
    try:
        _add_model_metadata(writer, config, model_dir, gguf.LlamaFileType[f"MOSTLY_{outtype.upper()}"])
        _add_tokenizer(writer, model_dir, config["vocab_size"])
        for t in plan:
            nbytes = _nbytes(t.shape, t.qtype)
            writer.add_tensor_info(t.name, t.shape, np.dtype(np.float32), nbytes, raw_dtype=t.qtype)
        writer.write_header_to_file(tmp)
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        for done, data in enumerate(_tensor_data(plan, shards, config, arch), start=1):
            writer.write_tensor_data(data)
            if progress is not None:
                progress(done, len(plan))
        writer.close()
        os.replace(tmp, out_file)
    except BaseException as e:
        writer.close()
        tmp.unlink(missing_ok=True)
        if isinstance(e, OSError):
            raise GGUFError(_("writing {file} failed: {error}; check that its directory exists, is writable and has room").format(
                file=out_file, error=e)) from e
        raise
    return {"file": out_file.name, "bytes": out_file.stat().st_size, "tensors": len(plan), "arch": arch}


# --- the model: config, weight files, tensor plan --------------------------------------------


def _read_config(model_dir: Path) -> dict[str, Any]:
    path = model_dir / "config.json"
    if not path.is_file():
        raise GGUFError(_("{path} has no config.json; export the model directory first (ftui export)").format(path=model_dir))
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise GGUFError(_("cannot read {path}: {error}; re-export the model directory").format(path=path, error=e)) from e
    return config


def _gguf_arch(config: dict[str, Any]) -> str:
    model_type = config.get("model_type")
    if vision_family(model_type) is not None:  # ftui.jobs.export refuses it before a job starts, in the same words
        raise GGUFError(_("GGUF export of a vision-language model ({model_type}) is not written by ftui: llama.cpp needs the language model "
                          "and a separate projector file (mmproj) for the vision tower. Export without --gguf, then convert the merged "
                          "export with llama.cpp's convert_hf_to_gguf.py: once for the model (convert_hf_to_gguf.py OUT --outtype f16) and "
                          "once with --mmproj for the projector (convert_hf_to_gguf.py OUT --mmproj)").format(model_type=model_type))
    if model_type not in GGUF_ARCHES:
        raise GGUFError(_("GGUF export does not support model_type {type}; supported: {types}. Export without --gguf and "
                          "convert with llama.cpp's convert_hf_to_gguf.py").format(type=repr(model_type), types=", ".join(GGUF_ARCHES)))
    for key in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads"):
        if not isinstance(config.get(key), int):
            raise GGUFError(_("config.json has no integer {key}; re-export the model directory").format(key=repr(key)))
    return GGUF_ARCHES[model_type]


def _weight_files(model_dir: Path) -> list[Path]:
    """The safetensors files in index order (one model.safetensors, or the index's shards)."""
    index = model_dir / "model.safetensors.index.json"
    if index.is_file():
        weight_map = json.loads(index.read_text(encoding="utf-8")).get("weight_map", {})
        names = list(dict.fromkeys(weight_map.values()))
        files = [model_dir / n for n in names]
        missing = [f.name for f in files if not f.is_file()]
        if missing:
            raise GGUFError(_("{path} lacks shard(s) {files} named in its index; re-export it").format(path=model_dir, files=", ".join(missing)))
        return files
    single = model_dir / "model.safetensors"
    if single.is_file():
        return [single]
    raise GGUFError(_("{path} has no model.safetensors (or index); GGUF export reads safetensors weights").format(path=model_dir))


def _head_dim(config: dict[str, Any]) -> int:
    return config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]


def _rope(config: dict[str, Any]) -> tuple[float, dict[str, Any]]:
    """(rope theta, rope scaling) from either config spelling: transformers 5's `rope_parameters`
    or the older `rope_theta` + `rope_scaling`."""
    params = config.get("rope_parameters") or {}
    theta = config.get("rope_theta", params.get("rope_theta", 10000.0))
    scaling = config.get("rope_scaling") or params
    rope_type = scaling.get("rope_type", scaling.get("type", "default"))
    if rope_type not in _ROPE_TYPES:
        raise GGUFError(_("rope type {type} has no GGUF form here (supported: {types}); convert with llama.cpp's "
                          "convert_hf_to_gguf.py").format(type=repr(rope_type), types=", ".join(_ROPE_TYPES)))
    return float(theta), {**scaling, "rope_type": rope_type}


def _hf_tensor_names(shards: list[Path]) -> Iterator[tuple[Path, str, tuple[int, ...]]]:
    for shard in shards:
        with safe_open(str(shard), framework="pt") as f:
            for name in f.keys():
                yield shard, name, tuple(f.get_slice(name).get_shape())


def _storage_type(name: str, shape: tuple[int, ...], outtype: str) -> gguf.GGMLQuantizationType:
    """The converter's rule: 1-D tensors and norms stay F32 (llama.cpp's kernels expect that);
    q8_0 needs rows that split into 32-value blocks, other rows fall back to f16."""
    if len(shape) <= 1 or name.endswith("_norm.weight"):
        return gguf.GGMLQuantizationType.F32
    qtype = gguf.GGMLQuantizationType[outtype.upper()]
    block_size = gguf.GGML_QUANT_SIZES[qtype][0]
    if shape[-1] % block_size != 0:
        return gguf.GGMLQuantizationType.F16
    return qtype


def _plan_tensors(config: dict[str, Any], arch: str, shards: list[Path], outtype: str) -> list[_Planned]:
    name_map = gguf.get_tensor_name_map(_model_arch(arch), config["num_hidden_layers"])
    tied = bool(config.get("tie_word_embeddings", False))
    plan: list[_Planned] = []
    for _shard, hf_name, shape in _hf_tensor_names(shards):
        if hf_name.endswith(".rotary_emb.inv_freq"):
            continue  # recomputed by llama.cpp from the rope metadata
        if tied and hf_name == "lm_head.weight":
            continue  # tied: llama.cpp reuses token_embd when output.weight is absent
        name = name_map.get_name(hf_name, try_suffixes=(".weight", ".bias"))
        if name is None:
            raise GGUFError(_("tensor {tensor} has no GGUF name for the {arch} architecture; this model is not a plain {arch} "
                              "model, convert it with llama.cpp's convert_hf_to_gguf.py").format(tensor=repr(hf_name), arch=arch))
        if name == "token_embd.weight" and shape[0] != config["vocab_size"]:
            raise GGUFError(_("{tensor} has {rows} rows but config.json's vocab_size is {vocab}; the GGUF token list would not "
                              "match the embeddings, re-export the model directory").format(
                tensor=hf_name, rows=shape[0], vocab=config["vocab_size"]))
        plan.append(_Planned(hf_name, name, shape, _storage_type(name, shape, outtype)))
    rope_factors = _llama3_rope_factors(config) if arch == "llama" else None
    if rope_factors is not None:
        name = gguf.TENSOR_NAMES[gguf.MODEL_TENSOR.ROPE_FREQS] + ".weight"
        plan.append(_Planned(None, name, rope_factors.shape, gguf.GGMLQuantizationType.F32, rope_factors))
    return plan


def _model_arch(arch: str) -> gguf.MODEL_ARCH:
    return next(a for a, n in gguf.MODEL_ARCH_NAMES.items() if n == arch)


def _nbytes(shape: tuple[int, ...], qtype: gguf.GGMLQuantizationType) -> int:
    return math.prod(gguf.quant_shape_to_byte_shape(shape, qtype)) if shape else 4


def _llama3_rope_factors(config: dict[str, Any]) -> np.ndarray | None:
    """Llama 3.1+ rope scaling: llama.cpp reads per-frequency factors from a rope_freqs tensor
    (the converter computes them the same way transformers' llama3 rope init does)."""
    theta, scaling = _rope(config)
    if scaling["rope_type"] != "llama3":
        return None
    dim = _head_dim(config)
    factor = scaling.get("factor", 8.0)
    low_freq_factor = scaling.get("low_freq_factor", 1.0)
    high_freq_factor = scaling.get("high_freq_factor", 4.0)
    old_context = scaling.get("original_max_position_embeddings", 8192)
    low_freq_wavelen = old_context / low_freq_factor
    high_freq_wavelen = old_context / high_freq_factor
    freqs = 1.0 / (theta ** (np.arange(0, dim, 2, dtype=np.float32) / dim))
    factors = []
    for freq in freqs:
        wavelen = 2 * math.pi / freq
        if wavelen < high_freq_wavelen:
            factors.append(1.0)
        elif wavelen > low_freq_wavelen:
            factors.append(factor)
        else:
            smooth = (old_context / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
            factors.append(1 / ((1 - smooth) / factor + smooth))
    return np.asarray(factors, dtype=np.float32)


def permute_qk(weights: np.ndarray, n_head: int) -> np.ndarray:
    """HF's Llama q/k rows hold each head's rotary halves apart; llama.cpp's rope expects them
    interleaved (the converter's permute; llama.cpp undoes nothing, so every Llama GGUF has it)."""
    return (
        weights.reshape(n_head, 2, weights.shape[0] // n_head // 2, *weights.shape[1:])
        .swapaxes(1, 2)
        .reshape(weights.shape)
    )


def _tensor_data(plan: list[_Planned], shards: list[Path], config: dict[str, Any], arch: str) -> Iterator[np.ndarray]:
    """Each planned tensor's bytes, in plan order, reading one HF tensor at a time."""
    by_name = {name: shard for shard, name, _shape in _hf_tensor_names(shards)}
    for t in plan:
        if t.hf_name is None:
            assert t.values is not None
            yield t.values
            continue
        with safe_open(str(by_name[t.hf_name]), framework="pt") as f:
            data = f.get_tensor(t.hf_name).to(torch.float32).numpy()
        if arch == "llama":
            data = _permuted_for_llama(t.hf_name, data, config)
        yield gguf.quants.quantize(data, t.qtype)


def _permuted_for_llama(hf_name: str, data: np.ndarray, config: dict[str, Any]) -> np.ndarray:
    n_head = config["num_attention_heads"]
    if hf_name.endswith(("q_proj.weight", "q_proj.bias")):
        return permute_qk(data, n_head)
    if hf_name.endswith(("k_proj.weight", "k_proj.bias")):
        return permute_qk(data, config.get("num_key_value_heads") or n_head)
    return data


# --- metadata ---------------------------------------------------------------------------------


def _add_model_metadata(writer: gguf.GGUFWriter, config: dict[str, Any], model_dir: Path, ftype: gguf.LlamaFileType) -> None:
    """The hyperparameters llama.cpp reads for these families (the converter's keys)."""
    writer.add_type(gguf.GGUFType.MODEL)
    writer.add_name(Path(model_dir).resolve().name)
    writer.add_block_count(config["num_hidden_layers"])
    if (n_ctx := config.get("max_position_embeddings")) is not None:
        writer.add_context_length(n_ctx)
    writer.add_embedding_length(config["hidden_size"])
    if (n_ff := config.get("intermediate_size")) is not None:
        writer.add_feed_forward_length(n_ff)
    writer.add_head_count(config["num_attention_heads"])
    writer.add_head_count_kv(config.get("num_key_value_heads") or config["num_attention_heads"])
    theta, scaling = _rope(config)
    writer.add_rope_freq_base(theta)
    _add_rope_scaling(writer, scaling)
    writer.add_layer_norm_rms_eps(config.get("rms_norm_eps", 1e-6))
    if config.get("head_dim") is not None:
        writer.add_key_length(config["head_dim"])
        writer.add_value_length(config["head_dim"])
    writer.add_rope_dimension_count(_head_dim(config))
    writer.add_vocab_size(config["vocab_size"])
    writer.add_file_type(ftype)
    writer.add_quantization_version(gguf.GGML_QUANT_VERSION)


def _add_rope_scaling(writer: gguf.GGUFWriter, scaling: dict[str, Any]) -> None:
    rope_type = scaling["rope_type"]
    if rope_type == "linear" and "factor" in scaling:
        writer.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        writer.add_rope_scaling_factor(scaling["factor"])
    elif rope_type == "yarn" and "factor" in scaling:
        writer.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        writer.add_rope_scaling_factor(scaling["factor"])
        if "original_max_position_embeddings" in scaling:
            writer.add_rope_scaling_orig_ctx_len(scaling["original_max_position_embeddings"])


# --- tokenizer --------------------------------------------------------------------------------


def _add_tokenizer(writer: gguf.GGUFWriter, model_dir: Path, n_vocab: int) -> None:
    path = model_dir / "tokenizer.json"
    if not path.is_file():
        raise GGUFError(_("{path} has no tokenizer.json; GGUF files carry the tokenizer, export it with the model").format(path=model_dir))
    tokenizer = json.loads(path.read_text(encoding="utf-8"))
    model = tokenizer.get("model") or {}
    if model.get("type") == "BPE" and _is_byte_level(tokenizer):
        _add_byte_level_bpe(writer, tokenizer, n_vocab)
        special = gguf.SpecialVocab(model_dir, load_merges=True, n_vocab=n_vocab)
    elif model.get("type") == "BPE" and model.get("byte_fallback"):
        _add_sentencepiece_bpe(writer, model_dir, n_vocab)
        special = gguf.SpecialVocab(model_dir, load_merges=False, n_vocab=n_vocab)
    else:
        raise GGUFError(_("tokenizer.json's {type} tokenizer has no GGUF form here (byte-level BPE or byte-fallback BPE are "
                          "supported); convert with llama.cpp's convert_hf_to_gguf.py").format(type=repr(model.get("type"))))
    if "bos" not in special.special_token_ids:
        # No BOS token (ftui's demo, Qwen): say so, or llama.cpp keeps its own default id and
        # a runtime that adds BOS would prepend a token the model never saw.
        special.add_special_token["bos"] = False
    special.add_to_gguf(writer, quiet=True)


def _is_byte_level(tokenizer: dict[str, Any]) -> bool:
    pre = tokenizer.get("pre_tokenizer") or {}
    parts = pre.get("pretokenizers", [pre]) if pre.get("type") == "Sequence" else [pre]
    return any(p.get("type") == "ByteLevel" for p in parts)


def _bpe_pre_name(tokenizer: dict[str, Any]) -> str:
    """llama.cpp's name for how the text is split before BPE (tokenizer.ggml.pre)."""
    pre = tokenizer.get("pre_tokenizer") or {}
    if pre.get("type") == "ByteLevel" and pre.get("use_regex", True):
        return "gpt-2"  # ByteLevel's own regex is GPT-2's
    parts = pre.get("pretokenizers", []) if pre.get("type") == "Sequence" else []
    regexes = [(p.get("pattern") or {}).get("Regex") for p in parts if p.get("type") == "Split"]
    if len(regexes) == 1 and regexes[0] in PRE_TOKENIZERS:
        return PRE_TOKENIZERS[regexes[0]]
    raise GGUFError(_("tokenizer.json's pre-tokenizer is not one llama.cpp knows here (GPT-2, Llama 3 or Qwen2 splitting); "
                      "convert with llama.cpp's convert_hf_to_gguf.py, which checks it by hash"))


def _looks_special(token: str) -> bool:
    return (token.startswith("<|") and token.endswith("|>")) or token in ("<s>", "</s>", "<unk>", "<pad>")


def _add_byte_level_bpe(writer: gguf.GGUFWriter, tokenizer: dict[str, Any], n_vocab: int) -> None:
    """Tokens as tokenizer.json spells them (byte-level characters), with the converter's types:
    special added tokens CONTROL, other added ones USER_DEFINED, ids the vocab skips padding."""
    vocab: dict[int, str] = {i: t for t, i in tokenizer["model"]["vocab"].items()}
    added = {a["id"]: a for a in tokenizer.get("added_tokens", [])}
    for i, a in added.items():
        vocab[i] = a["content"]
    if vocab and max(vocab) >= n_vocab:
        raise GGUFError(_("the tokenizer has token id {id} but config.json's vocab_size is {vocab}; the model and tokenizer "
                          "do not belong together").format(id=max(vocab), vocab=n_vocab))
    tokens, types = [], []
    for i in range(n_vocab):
        if i not in vocab:
            tokens.append(f"[PAD{i}]")
            types.append(gguf.TokenType.UNUSED)
        elif i in added:
            tokens.append(vocab[i])
            is_control = added[i].get("special") or _looks_special(vocab[i])
            types.append(gguf.TokenType.CONTROL if is_control else gguf.TokenType.USER_DEFINED)
        else:
            tokens.append(vocab[i])
            types.append(gguf.TokenType.NORMAL)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(_bpe_pre_name(tokenizer))
    writer.add_token_list(tokens)
    writer.add_token_types(types)


def _add_sentencepiece_bpe(writer: gguf.GGUFWriter, model_dir: Path, n_vocab: int) -> None:
    """A Llama-2 style tokenizer.json (BPE with byte fallback, "▁" for spaces) as llama.cpp's SPM
    tokenizer, read through gguf's LlamaHfVocab as the converter does without tokenizer.model."""
    try:
        vocab = gguf.LlamaHfVocab(model_dir)
    except (FileNotFoundError, TypeError) as e:
        raise GGUFError(_("tokenizer.json is not a SentencePiece-style BPE llama.cpp can read ({error})").format(error=e)) from e
    tokens, scores, types = [], [], []
    for i, (text, _score, toktype) in enumerate(vocab.all_tokens()):
        tokens.append(text)
        # LlamaHfVocab gives every token -1000; llama.cpp's SPM merges the highest-scoring pair
        # first, and a BPE vocab's ids follow its merge order, so -id keeps HF's merge priority.
        scores.append(-float(i) if toktype == gguf.TokenType.NORMAL else -1000.0)
        types.append(toktype)
    if len(tokens) > n_vocab:
        raise GGUFError(_("the tokenizer has {n} tokens but config.json's vocab_size is {vocab}").format(n=len(tokens), vocab=n_vocab))
    for i in range(len(tokens), n_vocab):
        tokens.append(f"[PAD{i}]".encode())
        scores.append(-1000.0)
        types.append(gguf.TokenType.UNUSED)
    writer.add_tokenizer_model("llama")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
