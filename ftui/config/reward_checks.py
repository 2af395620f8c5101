"""The checks of a config's rewards (a stage whose options hold ``reward_funcs``: grpo, ppo)
before a run starts, app side and torch-free: what the ranks would otherwise find seconds or
hours in (ftui.runner.rewards) is refused here, each problem naming its key and the fix.

- ``reward_funcs``: empty; a name that is neither a built-in, ``FILE.py:FUNCTION`` nor a
  directory; a reward file that does not exist, is not a .py file, does not parse, or has no
  top-level function of that name (read with ``ast``: the user's code is never run in the app);
  a directory that is not an ftui ``rm`` run, or one with nothing trained to load yet, or
  trained on another template; ``accuracy`` without the math-verify package.
- ``reward_weights``: not numbers, or not one per function; ``format_pattern`` not a regular
  expression; ``soft_punish_cache`` longer than ``max_completion_length``.
- The datasets (``reward_data_problems``, beside the datasets' own checks): a reward that
  compares with the reference (accuracy, exact) and a record among the first ones without a
  reference answer.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import re
from pathlib import Path
from typing import Any

from ftui.config.problems import FieldProblem
from ftui.config.schema import RunConfig
from ftui.i18n import _
from ftui.stages import find as find_stage
from ftui.stages.reward_options import (BUILTIN_REWARDS, NEEDS_MATH_VERIFY, NEEDS_REFERENCE, RL_EXTRA_INSTALL, entry_kind,
                                        reward_entries, reward_weight_values, split_function_entry)

MAX_REWARD_FILE = 4 << 20  # a reward file read to be parsed; a bigger one is no Python source a user wrote


def reward_options(cfg: RunConfig) -> dict[str, Any] | None:
    """The stage's option values when the stage learns from rewards (its options hold
    reward_funcs); None otherwise."""
    stage = find_stage(cfg.stage)
    if stage is None or "reward_funcs" not in stage.option_keys:
        return None
    return stage.option_values(cfg)


def reward_config_problems(cfg: RunConfig) -> list[FieldProblem]:
    """Every problem of the reward keys (the module's list), none for a stage without rewards."""
    stage = find_stage(cfg.stage)
    if stage is not None and "reward_model" in stage.option_keys:
        return reward_model_problems(cfg, stage.option_values(cfg))
    options = reward_options(cfg)
    if options is None:
        return []
    value = options["reward_funcs"]
    entries = reward_entries(value)
    if not entries:
        return [FieldProblem("reward_funcs", value, _("name at least one reward function: {builtins}, FILE.py:FUNCTION or an rm "
                                                      "run's directory").format(builtins=", ".join(BUILTIN_REWARDS)))]
    out: list[FieldProblem] = []
    for entry in entries:
        problem = entry_problem(entry, cfg)
        if problem:
            out.append(FieldProblem("reward_funcs", value, problem))
    out += _option_problems(cfg, options, entries)
    return out


def reward_model_problems(cfg: RunConfig, options: dict[str, Any]) -> list[FieldProblem]:
    """ppo's ``reward_model``: given, an ftui rm run with something trained on this run's template,
    and trained with the method ``reward_model_type`` says (lora: a LoRA adapter; full: full or freeze)."""
    value = str(options.get("reward_model") or "")
    if not value:
        return [FieldProblem("reward_model", value, _("stage ppo needs a reward model: give reward_model the directory of an "
                                                      "ftui rm run (train one with stage rm first)"))]
    kind_given = options.get("reward_model_type")
    if kind_given == "api":
        return []  # refused by the stage's own rule
    if not Path(value).expanduser().is_dir():
        return [FieldProblem("reward_model", value, _("{entry} is not a directory: reward_model is an ftui rm run's directory "
                                                      "(train one with stage rm first)").format(entry=value))]
    problem = rm_run_problem(value, cfg)
    if problem:
        return [FieldProblem("reward_model", value, problem)]
    if kind_given == "lora" and cfg.finetuning_type != "lora":
        return []  # refused by the stage's own rule
    from ftui.rundir.paths import CONFIG_FILE
    from ftui.safety.bounded_input import load_yaml

    method = load_yaml((Path(value).expanduser() / CONFIG_FILE).read_bytes()).get("finetuning_type", "lora")
    kind = "lora" if method == "lora" else "full"
    if kind != kind_given:
        return [FieldProblem("reward_model_type", kind_given,
                             _("rm run {run} trained with finetuning_type {method}: set reward_model_type {kind}").format(
                                 run=value, method=method, kind=kind))]
    return []


def _option_problems(cfg: RunConfig, options: dict[str, Any], entries: list[str]) -> list[FieldProblem]:
    out: list[FieldProblem] = []
    weights = options["reward_weights"]
    try:
        values = reward_weight_values(weights)
    except ValueError as err:
        out.append(FieldProblem("reward_weights", weights, _("{entry} is not a number: give numbers separated by commas, one per "
                                                             "reward function").format(entry=repr(str(err)))))
    else:
        if values and len(values) != len(entries):
            out.append(FieldProblem("reward_weights", weights, _("{n} weight(s) for {count} reward function(s); give one per "
                                                                 "function, or none for all 1").format(n=len(values), count=len(entries))))
    if "format" in entries:
        try:
            re.compile(str(options["format_pattern"]))
        except re.error as err:
            out.append(FieldProblem("format_pattern", options["format_pattern"], _("not a regular expression: {error}").format(error=err)))
    max_len = options.get("max_completion_length")  # the stage's own option (grpo's), at its default when unset
    cache = options["soft_punish_cache"]
    if "length" in entries and isinstance(max_len, int) and isinstance(cache, int) and cache > max_len:
        out.append(FieldProblem("soft_punish_cache", cache, _("longer than max_completion_length ({max}): the length reward's "
                                                              "soft punishment covers the last tokens before it").format(max=max_len)))
    return out


def entry_problem(entry: str, cfg: RunConfig) -> str | None:
    """What is wrong with one entry of reward_funcs (None: nothing found)."""
    kind = entry_kind(entry)
    if kind == "builtin":
        if entry in NEEDS_MATH_VERIFY and importlib.util.find_spec("math_verify") is None:
            return _("reward {name} needs the math-verify package: {install} (or use exact, the stripped text equal to the "
                     "reference)").format(name=entry, install=RL_EXTRA_INSTALL)
        return None
    if kind == "function":
        return function_problem(entry)
    return rm_run_problem(entry, cfg)


def function_problem(entry: str) -> str | None:
    """A ``FILE.py:FUNCTION`` entry: the file exists (relative to the current directory), is
    Python that parses, and defines FUNCTION at its top level (a def, an assignment or an
    import of that name); never imported here."""
    file_text, name = split_function_entry(entry) if ":" in entry else (entry, "")
    if not file_text.endswith(".py"):
        return _("{entry}: a reward function is FILE.py:FUNCTION, a Python file and a function in it").format(entry=entry)
    if not name.isidentifier():
        return _("{entry}: name the function after the file: {file}:FUNCTION").format(entry=entry, file=file_text)
    path = Path(file_text).expanduser()
    if not path.is_file():
        return _("reward file {file} does not exist (a path relative to the current directory, {cwd})").format(
            file=file_text, cwd=os.getcwd())
    try:
        if path.stat().st_size > MAX_REWARD_FILE:
            return _("reward file {file} is over {size} MB: not a Python source").format(file=file_text, size=MAX_REWARD_FILE >> 20)
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except SyntaxError as err:
        return _("reward file {file} is not valid Python: {error} (line {line})").format(file=file_text, error=err.msg, line=err.lineno)
    except (OSError, ValueError) as err:
        return _("reward file {file} cannot be read: {error}").format(file=file_text, error=err)
    found = top_level_name(tree, name)
    if found is None:
        return _("reward file {file} has no top-level function {name}").format(file=file_text, name=name)
    if found == "async":
        return _("{name} in {file} is async: ftui calls reward functions directly; make it a plain def").format(name=name, file=file_text)
    return None


def top_level_name(tree: ast.Module, name: str) -> str | None:
    """How a module's top level defines ``name``: "def", "async", "other" (an assignment or an
    import, which may hold a function) or None."""
    kind = None
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            kind = "def"
        elif isinstance(node, ast.AsyncFunctionDef) and node.name == name:
            kind = "async"
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                kind = "other"
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            if any((a.asname or a.name.split(".")[0]) == name for a in node.names):
                kind = "other"
    return kind


def rm_run_problem(entry: str, cfg: RunConfig) -> str | None:
    """An entry that is neither a built-in nor a function: an ftui ``rm`` run with something
    trained (final/ or a checkpoint) on the same template as this run's prompts."""
    import yaml

    from ftui.rundir.checkpoints import checkpoints
    from ftui.safety.bounded_input import YAMLRefused, load_yaml
    from ftui.rundir.paths import CONFIG_FILE, FINAL_DIR

    run_dir = Path(entry).expanduser()
    if not run_dir.is_dir():
        return _("{entry} is not a built-in reward ({builtins}), FILE.py:FUNCTION or an rm run's directory").format(
            entry=entry, builtins=", ".join(BUILTIN_REWARDS))
    try:
        data = load_yaml((run_dir / CONFIG_FILE).read_bytes())
    except (OSError, YAMLRefused, yaml.YAMLError):
        data = None
    if not isinstance(data, dict):
        return _("{entry} is not an ftui run (no readable {file}): a reward model is an rm run's directory").format(entry=entry, file=CONFIG_FILE)
    if data.get("stage") != "rm":
        return _("{entry} is a {stage} run, not an rm run: a reward model is trained with stage rm").format(
            entry=entry, stage=data.get("stage", "?"))
    if not (run_dir / FINAL_DIR / "value_head.safetensors").is_file() and not checkpoints(run_dir):
        return _("rm run {entry} has no final/ value head nor checkpoint yet: train it first").format(entry=entry)
    if data.get("template") and cfg.template and data["template"] != cfg.template:
        return _("rm run {entry} was trained on template {theirs}, this run's prompts use {ours}: the reward model would score "
                 "text it never saw; use the same template").format(entry=entry, theirs=data["template"], ours=cfg.template)
    return None


def reward_data_problems(cfg: RunConfig, data_needed: bool = True) -> list[FieldProblem]:
    """A reward that compares with the reference answer (accuracy, exact) and a dataset whose
    first records (as many as the datasets' checks read) lack one: alpaca's output, sharegpt's
    last turn as the assistant's. Unreadable datasets are left to the datasets' own checks."""
    from ftui.config.file_checks import FIRST_RECORDS
    from ftui.data.dataset_files import HubDataset, read_records
    from ftui.data.records import DataFormatError, apply_detected_format
    from ftui.data.registry import resolve_datasets

    options = reward_options(cfg)
    needing = [e for e in reward_entries(options["reward_funcs"]) if e in NEEDS_REFERENCE] if options else []
    if not needing or not data_needed:
        return []
    out: list[FieldProblem] = []
    for key in ("dataset", "eval_dataset"):
        text = getattr(cfg, key)
        if not text:
            continue
        try:
            for spec in resolve_datasets(text, cfg.dataset_dir):
                first = read_records(spec, limit=FIRST_RECORDS)
                if first:
                    apply_detected_format(spec, first[0])  # a file given by path: alpaca or sharegpt by its first record
                for i, record in enumerate(first):
                    if reference_of(record, spec, i) is False:
                        out.append(FieldProblem(key, text, _("reward {reward} compares with the reference answer, and dataset {name} "
                                                             "record {index} has none (alpaca: output; sharegpt: a last assistant "
                                                             "turn); give every record its answer").format(
                            reward=needing[0], name=repr(spec.name), index=i)))
                        break
        except (HubDataset, DataFormatError, OSError, ValueError):
            continue
    return out


def reference_of(record: Any, spec: Any, index: int) -> str | bool | None:
    """The record's reference answer; False when it has none; None when the record does not
    convert (the datasets' checks say why)."""
    from ftui.data.records import DataFormatError, to_messages

    try:
        messages, _tools = to_messages(record, spec, index)
    except DataFormatError:
        return None
    last = messages[-1] if messages else None
    if last is None or last["role"] != "assistant" or not last["content"].strip():
        return False
    return last["content"]
