"""LLaMA-Factory's own training entry point, run on its YAML, with the figures ftui's runs report.

    DISABLE_VERSION_CHECK=1 PYTHONPATH=<LLaMA-Factory's site>:... python bench/llamafactory_run.py CONFIG.yaml OUT.json

Runs ``llamafactory.train.tuner.run_exp`` (what ``llamafactory-cli train CONFIG.yaml`` runs) in
this process and writes OUT.json, rewritten as the run goes, so a run cut by a time limit keeps
what it measured:

- ``times``: each optimizer step's end (``time.time()`` after ``torch.cuda.synchronize()``, in a
  ``TrainerCallback.on_step_end``), as ftui's step events' ``t``;
- ``real_tokens``: each step's non-padding tokens (prompt and answer, every example packed into
  the micro batch), counted from the batch the trainer's ``training_step`` receives: with
  ``neat_packing`` and SDPA LLaMA-Factory's collator hands the model a 4-D mask in which a padding
  position cannot see itself (its diagonal entry is masked), so the real tokens are the unmasked
  diagonal entries; a 2-D mask counts its non-zero entries; no mask (its FlashAttention-2 path,
  padding removed) counts every input id. This is ftui's ``tokens`` (non-padding tokens);
- ``losses`` (the trainer's logged loss of each step) and ``peak_bytes``:
  ``torch.cuda.max_memory_allocated()`` at the end of training (``peak_bytes_at_exit`` after its
  final save as well);
- ``train_begin`` (``on_train_begin``: the model is loaded, wrapped and its optimizer made, the
  first batch not yet fetched) and ``train_end`` (``on_train_end``, before the final save);
- ``peak_rss_bytes``: ``resource.getrusage(RUSAGE_SELF).ru_maxrss`` of this process (its
  lifetime high-water mark, data preparation and model load included), read at every step's end
  and at the end of training (``peak_rss_bytes_at_exit`` after the final save): the CPU's
  counterpart of ``peak_bytes``;
- ``torch_threads`` (``torch.get_num_threads()``), ``optim`` (the trainer's optimizer) and
  ``rank`` / ``world_size``.

Under torchrun (``WORLD_SIZE`` > 1) each rank writes its own file, ``OUT.rankR.json``
(``rank_file``), and counts the tokens of its own batches only.

Nothing of LLaMA-Factory is changed: the counting wraps ``transformers.Trainer.training_step``
(LLaMA-Factory's ``CustomSeq2SeqTrainer`` inherits it) and the callback only reads the clock.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from pathlib import Path
from typing import Any

import yaml


def real_tokens(inputs: dict[str, Any]) -> Any:
    import torch

    mask = inputs.get("attention_mask")
    if torch.is_tensor(mask) and mask.dim() == 4:
        diag = torch.diagonal(mask[:, 0], dim1=-2, dim2=-1)
        return (diag == 0).sum() if torch.is_floating_point(mask) else diag.sum()
    if torch.is_tensor(mask) and mask.dim() == 2:
        return (mask != 0).sum()
    return inputs["input_ids"].numel()


def rank_file(out: Path, rank: int, world_size: int) -> Path:
    """Where rank ``rank`` writes: OUT itself for one process, OUT.rankR.json under torchrun."""
    return out if world_size <= 1 else out.with_name(f"{out.stem}.rank{rank}{out.suffix}")


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def main() -> int:
    config = Path(sys.argv[1])
    rank, world_size = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    out = rank_file(Path(sys.argv[2]), rank, world_size)
    args = yaml.safe_load(config.read_text())
    import torch
    import transformers
    from transformers import TrainerCallback

    cuda = torch.cuda.is_available()
    result: dict[str, Any] = {"config": args, "times": [], "real_tokens": [], "losses": [], "peak_bytes": None,
                              "versions": {}, "finished": False, "rank": rank, "world_size": world_size}
    for name in ("llamafactory", "transformers", "peft", "accelerate", "datasets", "trl", "tokenizers", "liger-kernel", "torch"):
        try:
            import importlib.metadata as md

            result["versions"][name] = md.version(name)
        except Exception:
            result["versions"][name] = None
    pending: list[Any] = []

    def save() -> None:
        out.write_text(json.dumps(result, indent=1))

    original = transformers.Trainer.training_step

    def training_step(self: Any, model: Any, inputs: dict[str, Any], *rest: Any, **kw: Any) -> Any:
        pending.append(real_tokens(inputs))
        return original(self, model, inputs, *rest, **kw)

    transformers.Trainer.training_step = training_step

    class Clock(TrainerCallback):
        def on_train_begin(self, _args: Any, state: Any, control: Any, **kw: Any) -> None:
            if cuda:
                torch.cuda.synchronize()
            result["train_begin"] = time.time()
            result["torch_threads"] = torch.get_num_threads()
            result["optim"] = str(getattr(_args, "optim", None))
            model = kw.get("model")
            if model is not None:
                result["attn_implementation"] = getattr(getattr(model, "config", None), "_attn_implementation", None)
                result["param_dtype"] = str(next(model.parameters()).dtype)
                result["trainable_params"] = sum(p.numel() for p in model.parameters() if p.requires_grad)
                result["gradient_checkpointing"] = bool(getattr(model, "is_gradient_checkpointing", False))
            save()

        def on_step_end(self, _args: Any, state: Any, control: Any, **kw: Any) -> None:
            if cuda:
                torch.cuda.synchronize()
            result["times"].append(time.time())
            result["real_tokens"].append(int(sum(int(t) for t in pending)))
            pending.clear()
            if cuda:
                result["peak_bytes"] = torch.cuda.max_memory_allocated()
            result["peak_rss_bytes"] = peak_rss_bytes()
            save()

        def on_log(self, _args: Any, state: Any, control: Any, logs: Any = None, **kw: Any) -> None:
            if logs and "loss" in logs:
                result["losses"].append(round(float(logs["loss"]), 4))

        def on_train_end(self, _args: Any, state: Any, control: Any, **kw: Any) -> None:
            if cuda:
                torch.cuda.synchronize()
                result["peak_bytes"] = torch.cuda.max_memory_allocated()
            result["train_end"] = time.time()
            result["peak_rss_bytes"] = peak_rss_bytes()
            result["steps"] = state.global_step
            save()

    from llamafactory.train.tuner import run_exp

    started = time.time()
    run_exp(args, callbacks=[Clock()])
    result["run_exp_s"] = round(time.time() - started, 1)
    if cuda:
        result["peak_bytes_at_exit"] = torch.cuda.max_memory_allocated()
    result["peak_rss_bytes_at_exit"] = peak_rss_bytes()
    result["finished"] = True
    save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
