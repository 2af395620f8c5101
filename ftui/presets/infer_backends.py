"""LLaMA-Factory's ``infer_backend`` values and what ftui does with each: a table, not code.

LLaMA-Factory's chat, predict and api generate with ``huggingface`` (transformers), ``vllm`` or
``sglang``. ftui generates with transformers only (``ftui.runner.backends``). vLLM and SGLang
are refused by name, with what to do, wherever a run or a job is checked (config checks of a
stage that generates, predict, eval, chat, serve): each needs its own CUDA build of torch
(vLLM 0.33 pins torch 2.14 and transformers < 5.21 as one CUDA-only wheel) that cannot sit
beside ftui's, so a path through them would be one nobody has run. Their keys (vllm_maxlen,
sglang_mem_fraction, ...) are accepted with LLaMA-Factory's types and defaults and change
nothing with huggingface, as in LLaMA-Factory. The config (a stage's rollouts), the chat worker
and the app's jobs (``ftui.jobs.backends``) read this one table. No torch here.
"""

from __future__ import annotations

from typing import Any

from ftui.i18n import N_, _
from ftui.safety.bounded_input import short_repr

# LLaMA-Factory's EngineName values (extras/constants.py), the choices of the config's field
LF_INFER_BACKENDS = ("huggingface", "vllm", "sglang")
# LLaMA-Factory's infer_dtype values (hparams/model_args.py)
LF_INFER_DTYPES = ("auto", "float16", "bfloat16", "float32")

NOT_RUN: dict[str, str] = {
    "vllm": N_("ftui does not run vLLM on this version: vLLM needs its own CUDA build of torch and transformers, "
               "so pip install vllm alone would not make ftui use it"),
    "sglang": N_("ftui does not run SGLang on this version: SGLang needs its own CUDA build of torch and "
                 "transformers, so pip install sglang alone would not make ftui use it"),
}


def refusal(name: Any, available: tuple[str, ...]) -> str:
    """What a backend that is not among ``available`` says: vLLM and SGLang why and what to do
    instead; any other name the ones there are."""
    if isinstance(name, str) and name in NOT_RUN:
        return _("infer_backend {name}: {why}; remove the key or set infer_backend: huggingface (for fast batch "
                 "generation raise predict's batch size: ftui predict --batch-size, or per_device_eval_batch_size)").format(
            name=name, why=_(NOT_RUN[name]))
    return _("infer_backend {name} is not available; ftui generates with: {names}").format(
        name=short_repr(name), names=", ".join(available))


def rollout_refusal(name: str) -> str:
    """What a stage that generates its own rollouts (grpo, ppo) says for infer_backend vllm or
    sglang, as TRL's use_vllm is refused (ftui.presets.trl_keys)."""
    return _("infer_backend {name}: {why}; ftui generates the rollouts with transformers' generate on the training "
             "model: remove the key or set infer_backend: huggingface").format(name=name, why=_(NOT_RUN[name]))
