"""Inference backends, keyed by LLaMA-Factory's ``infer_backend`` values: what generates the
answers of the chat worker and of the predict job.

A backend is a ``generate(loaded, prompts, sampling, *, streamer=None, stopping_criteria=None)``
returning (answer, its token count) for each prompt (``huggingface.generate`` says what each
argument is); a backend that takes images also takes ``media`` (each prompt's images' tensors),
which the callers pass only with prompts that have images. A new backend (vllm, sglang) is one module here and one line in ``BACKENDS``, and
its name in ``ftui.jobs.backends.INFER_BACKENDS``, the app's list that a job's infer_backend is
checked against before the job starts (until then vllm and sglang are refused by name, with what
to do: ``ftui.presets.infer_backends``).
"""

from __future__ import annotations

from typing import Callable

from ftui.presets.infer_backends import refusal
from ftui.runner.backends import huggingface

Generate = Callable[..., list[tuple[str, int]]]

DEFAULT_BACKEND = "huggingface"  # LLaMA-Factory's default infer_backend
BACKENDS: dict[str, Generate] = {
    "huggingface": huggingface.generate,
}


class UnknownBackend(ValueError):
    """An ``infer_backend`` no module here implements."""


def backend(name: str | None = None) -> Generate:
    """The ``generate`` of backend ``name`` (None: LLaMA-Factory's default, huggingface);
    UnknownBackend for any other: vllm and sglang by name with what to do, another name with the
    ones there are."""
    key = DEFAULT_BACKEND if name is None else name
    try:
        return BACKENDS[key]
    except (KeyError, TypeError):
        raise UnknownBackend(refusal(key, tuple(sorted(BACKENDS)))) from None
