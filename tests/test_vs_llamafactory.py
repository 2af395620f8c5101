"""bench/vs_llamafactory_gpu.py's pieces that run without LLaMA-Factory or a GPU: ftui takes the
YAML it writes for LLaMA-Factory (plus its own keys) without a problem, and the wrapper counts
the real tokens of LLaMA-Factory's neat-packing masks as ftui counts its own."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH))

from benchlib import model_dir  # noqa: E402
from llamafactory_run import real_tokens  # noqa: E402
from vs_llamafactory_gpu import VARIANTS, ftui_yaml, lf_yaml  # noqa: E402

from ftui.config.schema import RunConfig  # noqa: E402
from ftui.config.preflight import validate_config


def test_ftui_takes_the_llamafactory_yaml(tmp_path):
    model_dir(tmp_path / "model", max_position_embeddings=32768)
    for cpu in (False, True):
        args = argparse.Namespace(cutoff=2048, batch=8, steps=20, cpu=cpu)
        for method in ("full", "lora"):
            for variant in VARIANTS:
                lf = lf_yaml(method, tmp_path / "model", tmp_path / "data", tmp_path / "lf", args, variant)
                # (model_init: the folder has a config and tokenizer but no weights; the benchmark saves them)
                data = dict(ftui_yaml(lf, tmp_path / "runs", "x", cpu), model_init="random")
                _, problems = validate_config(data)
                # what only the GPU machine has (Liger is CUDA-only and not installed here; fa2 needs CUDA)
                problems = [p for p in problems if torch.cuda.is_available() or p.field not in ("enable_liger_kernel", "flash_attn")]
                assert not problems, problems
                cfg = RunConfig.model_validate(data)
                assert cfg.packing and cfg.cutoff_len == 2048 and cfg.finetuning_type == method
                assert cfg.pure_bf16 is (not cpu) and cfg.flash_attn == ("auto" if cpu else "fa2")


def test_real_tokens_of_a_neat_packing_mask():
    # LLaMA-Factory's prepare_4d_attention_mask of [[1, 1, 2, 2, 2, 0]]: 0 where a token may attend,
    # the dtype's minimum elsewhere; the padding position cannot even see itself
    idx = torch.tensor([[1, 1, 2, 2, 2, 0], [1, 2, 3, 0, 0, 0]])
    allowed = (idx[:, None, :, None] == idx[:, None, None, :]) & (idx != 0)[:, None, None, :] & torch.ones(6, 6, dtype=torch.bool).tril()
    mask = torch.where(allowed, torch.tensor(0.0, dtype=torch.bfloat16), torch.finfo(torch.bfloat16).min)
    assert int(real_tokens({"attention_mask": mask, "input_ids": idx})) == 8
    assert int(real_tokens({"attention_mask": allowed, "input_ids": idx})) == 8
    assert int(real_tokens({"attention_mask": idx, "input_ids": idx})) == 8
    assert int(real_tokens({"attention_mask": None, "input_ids": idx[:1, :5]})) == 5
