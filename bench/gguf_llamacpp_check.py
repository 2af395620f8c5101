"""Does llama.cpp run ftui's GGUF export as transformers runs the model it came from?

Writes MODEL_DIR (a standalone HF model directory, e.g. a full run's final/ or `ftui export`'s
output) as GGUF for each type, loads it with llama-cpp-python and compares, on one chat prompt:
the prompt's token ids (llama.cpp's tokenizer from the GGUF metadata vs the HF tokenizer), the
logits at every prompt position (fp32 transformers vs llama.cpp), and the greedy answer.
Prints one JSON object (recorded in bench/results/ unless --quick). Needs `llama_cpp` importable (no wheel on every registry: build the
sdist into a separate venv and put its site-packages on PYTHONPATH, see
bench/results/gguf_llamacpp_check.md).

    python bench/gguf_llamacpp_check.py RUN/final [--types f16,bf16,q8_0] [--prompt ...] [--quick]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib import machine, record  # noqa: E402

from ftui.runner.gguf_export import gguf_file_name, write_gguf  # noqa: E402

PROMPT = "What is ftui?"


def hf_side(model_dir: Path, prompt: str, max_new: int) -> dict:
    """Prompt ids, fp32 logits at each prompt position and the greedy continuation."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    text = tok.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True)
    ids = tok(text, add_special_tokens=False).input_ids
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].numpy()
        out = model.generate(
            torch.tensor([ids]), max_new_tokens=max_new, do_sample=False, eos_token_id=tok.eos_token_id,
            pad_token_id=tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id,
        )
    answer = [int(t) for t in out[0, len(ids):] if int(t) != tok.eos_token_id]
    return {"text": text, "ids": ids, "logits": logits, "answer_ids": answer,
            "answer": tok.decode(answer), "eos": tok.eos_token_id, "chat_template": tok.chat_template}


def llama_cpp_side(gguf_path: Path, text: str, ids: list[int], eos: int, max_new: int) -> dict:
    """The same through llama.cpp: its tokenization of the text, its logits for the HF ids, and
    its greedy continuation (argmax of each step's logits, so no sampler setting is involved)."""
    from llama_cpp import Llama

    llm = Llama(model_path=str(gguf_path), n_ctx=256, logits_all=True, n_threads=1, verbose=False)
    cpp_ids = llm.tokenize(text.encode("utf-8"), add_bos=False, special=True)
    llm.reset()
    llm.eval(ids)
    logits = np.array(llm.scores[: len(ids)], dtype=np.float32)
    answer: list[int] = []
    for _ in range(max_new):
        nxt = int(np.argmax(llm.scores[llm.n_tokens - 1]))
        if nxt == eos:
            break
        answer.append(nxt)
        llm.eval([nxt])
    return {
        "ids": cpp_ids, "logits": logits, "answer_ids": answer,
        "answer": llm.detokenize(answer).decode("utf-8", errors="replace"),
        "chat_template": llm.metadata.get("tokenizer.chat_template"),
    }


def compare(model_dir: Path, outtypes: list[str], prompt: str, max_new: int) -> dict:
    hf = hf_side(model_dir, prompt, max_new)
    result = {"model_dir": str(model_dir), "prompt": prompt, "prompt_tokens": len(hf["ids"]),
              "hf_answer": hf["answer"], "types": {}}
    scale = float(np.abs(hf["logits"]).max())
    with tempfile.TemporaryDirectory() as tmp:
        for outtype in outtypes:
            path = Path(tmp) / gguf_file_name(model_dir, outtype)
            info = write_gguf(model_dir, path, outtype)
            cpp = llama_cpp_side(path, hf["text"], hf["ids"], hf["eos"], max_new)
            diff = np.abs(cpp["logits"] - hf["logits"])
            result["types"][outtype] = {
                "file_bytes": info["bytes"],
                "same_prompt_ids": cpp["ids"] == hf["ids"],
                "same_chat_template": cpp["chat_template"] == hf["chat_template"],
                "max_abs_logit_diff": float(diff.max()),
                "max_abs_logit": scale,
                "same_argmax_positions": int((cpp["logits"].argmax(-1) == hf["logits"].argmax(-1)).sum()),
                "positions": len(hf["ids"]),
                "same_greedy_answer": cpp["answer_ids"] == hf["answer_ids"],
                "llama_cpp_answer": cpp["answer"],
            }
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model_dir", type=Path)
    p.add_argument("--types", default="f16,bf16,q8_0")
    p.add_argument("--prompt", default=PROMPT)
    p.add_argument("--max-new", type=int, default=32)
    p.add_argument("--quick", action="store_true", help="f16 only, 8 new tokens (the test's smoke run)")
    a = p.parse_args()
    types = ["f16"] if a.quick else a.types.split(",")
    result = compare(a.model_dir, types, a.prompt, 8 if a.quick else a.max_new)
    if not a.quick:
        import llama_cpp

        result["machine"] = {**machine(), "llama_cpp_python": llama_cpp.__version__}
        record("gguf_llamacpp_check", result)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
