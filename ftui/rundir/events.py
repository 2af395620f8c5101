"""The event schema (version 1): the contract between the runner and everything that reads a run.

Rank 0 of a job appends one JSON object per line to ``RUN_DIR/events.jsonl``
(``ftui.rundir.event_writer``); the dashboard, ``ftui attach``, ``ftui watch`` and ``ftui
train``'s follower read it (``ftui.rundir.event_reader``). This module must stay free of
torch (docs/architecture.md): it is imported by the dashboard.

A job starts with one start event: training with ``run_start`` (its engine, method,
parameters and planned steps), every other job (predict, eval, export: ``ftui.rundir.job_kinds``)
with ``job_start`` (its kind, what it loads, on what). Runs written before ``job_start``
existed began their jobs with a ``run_start`` carrying ``job``: :func:`started_job` reads both.

Every line is ``{"v": 1, "t": <unix seconds>, "event": <kind>, ...fields}``. Readers skip a
torn last line (the writer may be in the middle of it) and unknown kinds; writers flush
every line so that a reader in another process sees it at once.
"""

from __future__ import annotations

import math
import time
from typing import Any

SCHEMA_VERSION = 1

# Required fields per event kind. Fields may be ``None`` where the meaning says so
# (``mfu`` when the device's peak is unknown, ``loss_scale`` outside fp16, ``grad_norm``
# when the step was skipped); extra fields are allowed and ignored by old readers.
REQUIRED: dict[str, tuple[str, ...]] = {
    "run_start": (
        "run_id", "engine", "precision", "method", "world_size", "nodes", "model",
        "total_params", "trainable_params", "max_steps", "planned_tokens_per_step",
    ),
    "step": (
        "step", "epoch", "loss", "lr", "grad_norm", "tokens", "trainable_tokens",
        "tokens_per_s", "step_time_s", "mfu", "loss_scale", "mem",
    ),
    # Any job but training: its kind (ftui.rundir.job_kinds), the model it loads as the user named it
    # (``source``), its precision and processes; a predict or eval job adds ``examples``, an
    # export job ``out``, and any job may add ``model``, ``device``, ``dataset``, ``total_params``.
    "job_start": ("run_id", "job", "source", "precision", "world_size"),
    "eval": ("step", "eval_loss"),
    "checkpoint": ("step", "path"),
    "log": ("level", "message"),
    "prepare": ("done", "total"),
    "progress": ("done", "total"),  # a predict job's examples answered so far
    "predict": ("predict_samples",),  # a predict job's results (predict_results.json's fields)
    "export": ("out",),  # an export job's result: out, files, bytes, gguf, dtype, params, commands
    # A serve job (ftui.runner.serve): listening (url, host, the real port, the served model ids, whether a
    # key is needed), then its counters at most every 2 s while they change and once at its end
    "serve_ready": ("url", "host", "port", "models", "key"),
    "serve_stats": ("requests", "answered", "rejected", "errors", "disconnected", "active", "queued",
                    "prompt_tokens", "generated_tokens", "tokens_per_s", "uptime_s"),
    "run_end": ("status", "reason"),
}
NULLABLE = {"mfu", "loss_scale", "grad_norm", "max_steps", "reason", "loss", "eval_loss"}
RUN_END_STATUSES = ("completed", "stopped", "failed")
START_EVENTS = ("run_start", "job_start")  # the first record of a job (a resumed training job writes a new run_start)
TRAIN_JOB = "train"  # the job a run_start without a ``job`` field starts
LOG_LEVELS = ("debug", "info", "warning", "error")
# Fields of step and eval events that readers show in their own places (or not at all). Any
# other number in them is a figure of a newer stage (DPO's "rewards/accuracies", ...): readers
# show it by its name (extra_figures), so a new stage needs no dashboard code.
KNOWN_FIELDS: dict[str, frozenset[str]] = {
    "step": frozenset(REQUIRED["step"]) | {"v", "t", "event", "skipped", "window_steps", "total_tokens", "data_wait_s", "ranks"},
    "eval": frozenset(REQUIRED["eval"]) | {"v", "t", "event", "eval_tokens"},
}
MAX_EXTRA_FIGURES = 16  # a run directory is untrusted: it must not fill the screen ...
MAX_FIGURE_NAME = 40  # ... nor push the figures out of their panel
MEM_FIELDS = ("rank", "allocated", "reserved", "peak")


def make_event(kind: str, t: float | None = None, **fields: Any) -> dict[str, Any]:
    """Builds one event dict, checked against the schema (raises ValueError if not valid)."""
    event = {"v": SCHEMA_VERSION, "t": time.time() if t is None else t, "event": kind, **fields}
    problems = validate_event(event)
    if problems:
        raise ValueError(f"invalid {kind!r} event: " + "; ".join(problems))
    return event


def validate_event(event: Any) -> list[str]:
    """Returns what is wrong with an event (an empty list when it follows schema v1)."""
    if not isinstance(event, dict):
        return ["an event is a JSON object"]
    problems = []
    if event.get("v") != SCHEMA_VERSION:
        problems.append(f"v must be {SCHEMA_VERSION}, got {event.get('v')!r}")
    if not isinstance(event.get("t"), (int, float)):
        problems.append("t must be unix seconds")
    kind = event.get("event")
    if kind not in REQUIRED:
        problems.append(f"unknown event kind {kind!r}")
        return problems
    for name in REQUIRED[kind]:
        if name not in event:
            problems.append(f"{kind} lacks field {name!r}")
        elif event[name] is None and name not in NULLABLE:
            problems.append(f"{kind} field {name!r} is null")
    if kind == "run_end" and event.get("status") not in RUN_END_STATUSES:
        problems.append(f"run_end status must be one of {RUN_END_STATUSES}")
    if kind == "log" and event.get("level") not in LOG_LEVELS:
        problems.append(f"log level must be one of {LOG_LEVELS}")
    if kind == "step" and isinstance(event.get("mem"), list):
        for entry in event["mem"]:
            if not isinstance(entry, dict) or any(k not in entry for k in MEM_FIELDS):
                problems.append(f"step mem entries need {MEM_FIELDS}")
                break
    return problems


_INT_FIELDS = ("step", "max_steps", "world_size", "nodes", "tokens", "trainable_tokens", "total_tokens",
               "total_params", "trainable_params", "resumed_from_step", "exit_code", "planned_tokens_per_step",
               "examples")
_FLOAT_FIELDS = ("t", "epoch", "loss", "lr", "grad_norm", "tokens_per_s", "step_time_s", "mfu", "loss_scale", "eval_loss")
_TEXT_FIELDS = ("run_id", "engine", "precision", "method", "model", "status", "reason", "hint", "error_type",
                "error_message", "level", "message", "path", "job")
_BIG = 1 << 62  # the loss curve keeps steps in C longs


def extra_figures(event: dict[str, Any]) -> tuple[tuple[str, int | float], ...]:
    """The numbers of a step or eval event beyond its KNOWN_FIELDS, as (name, value) in file
    order: finite ints and floats only (not bools), names of printable characters only (no
    escape sequences; they are still untrusted text, never markup), at most
    MAX_EXTRA_FIGURES of them."""
    known = KNOWN_FIELDS.get(event.get("event"), frozenset())
    out: list[tuple[str, int | float]] = []
    for name, value in event.items():
        if name in known or not 0 < len(name) <= MAX_FIGURE_NAME or not name.isprintable():
            continue
        if type(value) is int and -_BIG < value < _BIG or type(value) is float and math.isfinite(value):
            out.append((name, value))
            if len(out) == MAX_EXTRA_FIGURES:
                break
    return tuple(out)


def well_formed(event: Any) -> bool:
    """Whether a parsed line is an event readers can fold without checking each field again:
    a known kind of schema v1 whose fields, where present, have their types (a string
    ``"step"``, a ``"loss": "NaN"`` or an out-of-range number would crash them later)."""
    if not isinstance(event, dict) or event.get("v") != SCHEMA_VERSION or event.get("event") not in REQUIRED:
        return False
    for name in _INT_FIELDS:
        v = event.get(name)
        if v is not None and (type(v) is not int or not -_BIG < v < _BIG):
            return False
    for name in _FLOAT_FIELDS:
        v = event.get(name)
        if v is not None and (type(v) not in (int, float) or (type(v) is int and not -_BIG < v < _BIG)):
            return False
    if not isinstance(event.get("t"), (int, float)):
        return False
    for name in _TEXT_FIELDS:
        if event.get(name) is not None and not isinstance(event[name], str):
            return False
    kind = event["event"]
    if kind in ("step", "eval") and event.get("step") is None:
        return False
    if kind == "run_end" and event.get("status") not in RUN_END_STATUSES:
        return False
    mem = event.get("mem")
    if mem is not None and not (isinstance(mem, list) and all(
            isinstance(m, dict) and all(m.get(k) is None or (type(m[k]) is int and -_BIG < m[k] < _BIG) for k in MEM_FIELDS)
            for m in mem)):
        return False
    return True


def started_job(event: dict[str, Any]) -> str | None:
    """The job a start event begins (None for any other event): a ``job_start``'s ``job``; a
    ``run_start``'s ``job`` where an older predict, eval or export job wrote one (before
    ``job_start``, they wrote a training-shaped run_start carrying it), else training."""
    if event.get("event") not in START_EVENTS:
        return None
    job = event.get("job")
    return job if isinstance(job, str) and job else TRAIN_JOB
