"""LLaMA-Factory's way in to prediction: a predict YAML (``do_predict: true``,
``predict_with_generate: true``, no ``do_train``) given to ``ftui train`` runs as
``ftui predict``'s arguments."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rich.console import Console

from ftui.cli.console import error_line
from ftui.cli.options import parse_set
from ftui.i18n import _
from ftui.jobs.backends import backend_problem
from ftui.rundir.paths import default_runs_root
from ftui.safety.bounded_input import load_yaml, short_repr


# LLaMA-Factory's predict keys, read by llamafactory_predict_args instead of the training config
LF_PREDICT_KEYS = ("do_train", "do_predict", "do_eval", "predict_with_generate", "adapter_name_or_path", "eval_dataset",
                   "per_device_eval_batch_size", "max_new_tokens", "temperature", "top_p", "do_sample", "output_dir",
                   "infer_backend")


def llamafactory_predict_args(args: argparse.Namespace, err: Console) -> argparse.Namespace | bool | None:
    """A LLaMA-Factory predict YAML (``do_predict: true``, ``predict_with_generate: true``, no
    ``do_train``) as ftui predict's arguments: ``eval_dataset`` scored, ``model_name_or_path``
    with ``adapter_name_or_path`` on it, the job under ``output_dir``. None: a training YAML;
    False: a predict YAML with a problem (said)."""
    if not args.config or args.preset:
        return None
    import yaml

    try:
        data = load_yaml(Path(args.config).expanduser().read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None  # the training path reports it
    if not isinstance(data, dict) or not data.get("do_predict") or data.get("do_train"):
        return None
    data.update(parse_set(args.overrides))
    if not data.get("predict_with_generate"):
        err.print(error_line(_("do_predict without predict_with_generate scores no answers; set predict_with_generate: "
                               "true (answers and BLEU / ROUGE), or use ftui eval RUN --dataset NAMES for the eval loss")))
        return False
    adapter = data.get("adapter_name_or_path")
    if isinstance(adapter, str) and "," in adapter:
        err.print(error_line(_("adapter_name_or_path names several adapters; ftui predicts with one (merge the others first)")))
        return False
    infer_backend = data.get("infer_backend")
    problem = backend_problem(infer_backend)
    if problem:
        err.print(error_line(problem))
        return False
    dataset = data.get("eval_dataset") or data.get("dataset")
    if not dataset or not data.get("model_name_or_path"):
        err.print(error_line(_("a predict YAML needs model_name_or_path and eval_dataset")))
        return False
    try:
        temperature = _number(data, "temperature", 0.95, float) if data.get("do_sample", True) else 0.0
        top_p = _number(data, "top_p", 0.7, float)
        max_new_tokens = _number(data, "max_new_tokens", 1024, int)
        batch_size = _number(data, "per_device_eval_batch_size", 8, int)
        max_samples = _number(data, "max_samples", None, int)
    except ValueError as e:
        err.print(error_line(str(e)))
        return False
    model_data = {k: v for k, v in data.items() if k not in LF_PREDICT_KEYS and k not in ("dataset", "stage")}
    return argparse.Namespace(
        command="predict", run=None, checkpoint=None, base=False, model=str(data["model_name_or_path"]),
        adapter=str(adapter) if adapter else None, template=data.get("template"), dataset=str(dataset),
        dataset_dir=data.get("dataset_dir"), max_samples=max_samples, nproc_per_node=1, device="auto", cutoff_len=None,
        detach=args.detach, root=str(data.get("output_dir") or default_runs_root()),
        max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p,
        batch_size=batch_size, model_data=model_data, model_source=str(args.config),
        **({"infer_backend": infer_backend} if infer_backend is not None else {}))


def _number(data: dict[str, Any], key: str, default: Any, kind: type) -> Any:
    """A predict YAML's number, or ValueError naming the key and the value."""
    value = data.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (kind is int and value != int(value)):
        raise ValueError(_("{key}: {value} is not a {kind}").format(
            key=key, value=short_repr(value), kind=_("whole number") if kind is int else _("number")))
    return kind(value)
