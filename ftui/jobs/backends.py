"""Which inference backend a job generates with, checked before the job starts (torch-free:
the app's side of ``ftui.runner.backends``).

``INFER_BACKENDS`` names the backends the runner has (``ftui.runner.backends.BACKENDS``; a test
keeps the two lists equal). A config's ``infer_backend`` (LLaMA-Factory's key; a predict YAML's,
or a run's config.yaml) naming another is refused here, by name and with what to do, before a
predict, eval or serve job's directory is made; the chat worker refuses the same at its load.
"""

from __future__ import annotations

from typing import Any

from ftui.presets.infer_backends import refusal

INFER_BACKENDS = ("huggingface",)


def backend_problem(name: object) -> str | None:
    """None for huggingface / None (LLaMA-Factory's default); for vllm and sglang a refusal naming
    them and what to do; for anything else the known names."""
    if name is None or (isinstance(name, str) and name in INFER_BACKENDS):
        return None
    return refusal(name, INFER_BACKENDS)


def job_backend(generation: dict[str, Any] | None, cfg: Any) -> object:
    """The backend a job generates with: its own setting (a predict YAML's infer_backend), else
    its config's (the run's ``infer_backend``), else LLaMA-Factory's default (None)."""
    own = (generation or {}).get("infer_backend")
    return own if own is not None else getattr(cfg, "infer_backend", None)
