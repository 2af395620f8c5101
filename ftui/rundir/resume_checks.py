"""What a resume would change, decided before anything is written to the run.

A resume goes on from a checkpoint with the run's config.yaml (plus --set overrides) and the
dataset files as they are now. Three things can make that a different training than the one
the checkpoint continues, and each is said here, torch-free, so the CLI can refuse before it
saves the config or the runner writes a ``run_end``:

- the checkpoint cannot be loaded with these settings (engine, batch, accumulation, DeepSpeed's
  number of ranks): ``checkpoint_mismatch``, the rule the runner applies too;
- a key differs from the run's config (``config_changes``): the base model or the datasets are
  refused unless the user allows it, the others are listed;
- a dataset file's records differ from the run's fingerprint (``fingerprint_changes``).
"""

from __future__ import annotations

from typing import Any

from ftui.safety.bounded_input import short_repr
from ftui.i18n import _

# Keys whose change makes the resumed steps train another model or on other data: refused
# unless the user says --allow-changed. Other keys (max_steps, learning_rate...) are listed.
GUARDED_KEYS = ("model_name_or_path", "model_init", "dataset", "eval_dataset")
# A base model's or dataset's name or file path is what a difference names: shown whole up to
# Linux's PATH_MAX (a deep folder's path is often longer than short_repr's cut, and cut it would
# name no file). Other values are quoted as every message quotes a user's value: short_repr.
PATH_CHARS = 4096


def shown_path(value: Any) -> str:
    """A model's or dataset's name or file path in a difference: its repr (control characters
    escaped), whole unless longer than any path can be."""
    text = repr(value)
    return text if len(text) <= PATH_CHARS else text[:PATH_CHARS] + "…"


def checkpoint_mismatch(name: str, state: dict[str, Any], cfg: Any, world_size: int | None = None) -> str | None:
    """Why the checkpoint ``name`` (its trainer_state.json as ``state``) cannot be loaded by a
    run with ``cfg``, else None. The runner refuses the same (runner.checkpoint.load_checkpoint);
    the CLI asks first, so a refused resume changes nothing in the run."""
    world_size = cfg.world_size if world_size is None else world_size
    if state.get("engine") != cfg.engine_name:
        return _("{name} was written by engine {saved}, this run uses {engine}; resume with the engine it was "
                 "saved with").format(name=name, saved=state.get("engine"), engine=cfg.engine_name)
    if state.get("world_size") != world_size and cfg.uses_deepspeed:
        return _("{name} was written by {saved} DeepSpeed ranks, this run has {ranks}; resume with the same "
                 "number of processes").format(name=name, saved=state.get("world_size"), ranks=world_size)
    if state.get("micro_batch_size") != cfg.per_device_train_batch_size or state.get("accumulation") != cfg.gradient_accumulation_steps:
        return _("{name} was saved with micro batch {saved_bs} x accumulation {saved_accum}; this config has "
                 "{bs} x {accum}. Resume with the batch settings it was saved with").format(
            name=name, saved_bs=state.get("micro_batch_size"), saved_accum=state.get("accumulation"),
            bs=cfg.per_device_train_batch_size, accum=cfg.gradient_accumulation_steps)
    return None


def config_changes(old: dict[str, Any], new: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """(key, old value, new value) for each key whose value differs, in the config's order."""
    keys = list(new) + [k for k in old if k not in new]
    return [(k, old.get(k), new.get(k)) for k in keys if old.get(k) != new.get(k)]


def _key(entry: dict[str, Any]) -> tuple[str, str]:
    return str(entry.get("role")), str(entry.get("name"))


def fingerprint_changes(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Each dataset whose file differs from the run's recorded fingerprint, one line each."""
    before = {_key(e): e for e in old.get("datasets", []) if isinstance(e, dict)}
    after = {_key(e): e for e in new.get("datasets", []) if isinstance(e, dict)}
    lines = []
    for key, now in after.items():
        was = before.get(key)
        name = shown_path(key[1])
        if now.get("error") and not (was or {}).get("error"):
            lines.append(_("{role} {name}: cannot be read now ({error})").format(role=key[0], name=name, error=short_repr(now["error"])))
        elif was is None:
            lines.append(_("{role} {name}: not in the run's fingerprint (a dataset the run did not train on)").format(role=key[0], name=name))
        elif was.get("hub") != now.get("hub"):
            lines.append(_("{role} {name}: hub dataset {old} -> {new}").format(
                role=key[0], name=name, old=short_repr(was.get("hub")), new=short_repr(now.get("hub"))))
        elif was.get("path") != now.get("path") and was.get("sha256") != now.get("sha256"):
            lines.append(_("{role} {name}: file {old} -> {new}, other records").format(
                role=key[0], name=name, old=shown_path(was.get("path")), new=shown_path(now.get("path"))))
        elif was.get("size") != now.get("size"):
            lines.append(_("{role} file {path}: size {old} -> {new} bytes, records changed").format(
                role=key[0], path=shown_path(now.get("path")), old=was.get("size"), new=now.get("size")))
        elif was.get("sha256") != now.get("sha256"):
            lines.append(_("{role} file {path}: same size ({size} bytes) but its records' sha256 changed (records replaced)").format(
                role=key[0], path=shown_path(now.get("path")), size=now.get("size")))
    for key in before:
        if key not in after:
            lines.append(_("{role} {name}: the run trained on it, this resume does not").format(role=key[0], name=shown_path(key[1])))
    return lines

