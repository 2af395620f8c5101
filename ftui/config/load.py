"""Reading a config: a new run's YAML (checked in full, ftui.config.preflight) and a run's own
saved config.yaml (its schema alone).

A run's config was checked when the run started, on the machine it started on. Read again
later, by its ranks, its supervisor, the chat worker, predict, eval, export or the runs listing,
perhaps on another machine (a login node, a laptop without a GPU), it is read with its schema
only: this machine's GPUs, packages and the model's files do not decide whether it can be read.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from ftui.config.preflight import check_config, preflight
from ftui.config.problems import ConfigError, FieldProblem, pydantic_problems, unsupported_warning
from ftui.config.schema import RunConfig
from ftui.i18n import _
from ftui.rundir.paths import DEMO_DATASET, DEMO_MODEL
from ftui.safety.bounded_input import YAMLRefused, load_yaml, yaml_reason


def parse_config(data: dict[str, Any], source: str = "config", data_needed: bool | None = None) -> tuple[RunConfig, list[str]]:
    """Validates a new run's mapping in full (ftui.config.preflight.check_config); returns
    (config, warnings) or raises ConfigError. ``data_needed`` given: the whole preflight, the
    datasets' files and first records too (what ``ftui train`` and the launch form check;
    False: only their registry entries, the data being on another machine)."""
    checked = check_config(data) if data_needed is None else preflight(data, data_needed=data_needed)
    if checked.config is None:
        raise ConfigError(checked.problems, source)
    warning = unsupported_warning(checked.config.model_extra or {}, checked.config.stage)
    return checked.config, ([warning] if warning else []) + checked.warnings


def load_config(path: str | os.PathLike[str], overrides: dict[str, Any] | None = None,
                data_needed: bool | None = None) -> tuple[RunConfig, list[str]]:
    """Reads a new run's YAML file (safe_load) into a RunConfig, checked in full (``data_needed``:
    as parse_config); returns (config, warnings)."""
    data = read_yaml_mapping(path)
    if isinstance(data, dict) and overrides:
        data = {**data, **overrides}
    return parse_config(data, str(path), data_needed)


def read_run_config(path: str | os.PathLike[str]) -> RunConfig:
    """A run's own config.yaml (or a job's), read with its schema alone: no check of this
    machine, the model's files or the datasets, which were checked when the run started and may
    be elsewhere now. Raises ConfigError when the file cannot be read or is not a config."""
    data = read_yaml_mapping(path)
    if not isinstance(data, dict):
        raise ConfigError([FieldProblem("config", data, _("expected a mapping of key: value"))], str(path))
    try:
        return RunConfig.model_validate(data)
    except ValidationError as err:
        raise ConfigError(pydantic_problems(err, data), str(path)) from None


def read_yaml_mapping(path: str | os.PathLike[str]) -> Any:
    """A config file's YAML (safe_load, bounded: ftui.safety.bounded_input); {} for an empty
    file. Raises ConfigError naming the file when it cannot be read or parsed."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError([FieldProblem("config", str(p), _("no such file"))], str(p)) from None
    except IsADirectoryError:
        raise ConfigError([FieldProblem("config", str(p), _("a directory, not a YAML file"))], str(p)) from None
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError([FieldProblem("config", str(p), _("cannot read it: {error}").format(error=err))], str(p)) from None
    try:
        data = load_yaml(text)
    except YAMLRefused as err:  # an alias bomb, a value that contains itself, nesting past the stack
        raise ConfigError([FieldProblem("config", str(p), _("refused: {reason}").format(reason=err))], str(p)) from None
    except yaml.YAMLError as err:
        raise ConfigError([FieldProblem("config", str(p), _("not valid YAML: {error}").format(error=yaml_reason(err)))], str(p)) from None
    return {} if data is None else data


def demo_config(**overrides: Any) -> RunConfig:
    """The built-in demo: a tiny random-weight Llama learns the shipped Q&A set on the CPU."""
    cfg, _warnings = parse_config(demo_data(**overrides), "demo preset")
    return cfg


def demo_data(**overrides: Any) -> dict[str, Any]:
    """The demo's settings (demo_config's), with ``overrides``."""
    data: dict[str, Any] = dict(
        model_name_or_path=DEMO_MODEL,
        model_init="random",
        finetuning_type="full",
        dataset=DEMO_DATASET,
        cutoff_len=128,
        per_device_train_batch_size=8,
        gradient_accumulation_steps=1,
        learning_rate=3e-3,
        num_train_epochs=30,
        lr_scheduler_type="cosine",
        warmup_ratio=0.05,
        weight_decay=0.0,
        logging_steps=1,
        save_steps=100000,
        run_name="demo",
        device="cpu",
        seed=42,
    )
    data.update(overrides)
    return data
