"""The inference backends a job can generate with, by LLaMA-Factory's ``infer_backend`` names
(torch-free: the runner's ``ftui.runner.backends`` has the modules; this side checks the name
before any job starts)."""

from __future__ import annotations

from ftui.i18n import _

INFER_BACKENDS = ("huggingface",)  # what ftui.runner.backends.BACKENDS implements
UNTESTED_BACKENDS = ("vllm", "sglang")  # LLaMA-Factory's other values: not run by this ftui


def backend_problem(name: object) -> str | None:
    """None for huggingface (or no backend named); for vllm and sglang a refusal naming them and
    what to do; for anything else the known names."""
    if name is None or name in INFER_BACKENDS:
        return None
    if name in UNTESTED_BACKENDS:
        return _("infer_backend {name}: this ftui does not run {name} (it needs its own CUDA build, untested here); "
                 "remove the key or set infer_backend: huggingface").format(name=name)
    return _("infer_backend {name} is not one ftui knows; use one of: {names}").format(
        name=repr(name)[:80], names=", ".join(INFER_BACKENDS))
