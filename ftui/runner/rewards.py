"""The reward functions of a run that learns from rewards (grpo, ppo), called in each rank on
its completions: the built-ins, a user's own Python function and a reward model from an ftui
``rm`` run (ftui.stages.reward_options lists the entries of ``reward_funcs``).

``Rewards(prompts, completions, completion_ids, records)`` returns one column per function,
(N, F) float32 on the CPU, NaN where a function returned None (TRL's "no reward for this
one"); the weighted sum and the advantages are the caller's (ftui.runner.grpo_loss). A user's
function is called as TRL calls one: ``f(prompts=, completions=, completion_ids=, **columns)``,
each column a list with one value per completion. Whatever it does wrong (raises, returns the
wrong number of values, a non-number, NaN or infinity) ends the run with a RewardError naming
the file, the function and the record (its dataset and index), never a traceback.
"""

from __future__ import annotations

import hashlib
import importlib.util
import math
import numbers
import re
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch

from ftui.i18n import _
from ftui.stages.reward_options import (BUILTIN_REWARDS, REWARD_OPTIONS, RL_EXTRA_INSTALL, entry_kind, reward_entries,
                                        reward_weight_values, split_function_entry)

# The columns TRL passes by name; a dataset column of the same name cannot be passed too
RESERVED = ("prompts", "completions", "completion_ids")
THINK_PATTERN = re.compile(r"^<think>(?!.*<think>)(.*?)</think>.*$", re.DOTALL | re.MULTILINE)  # TRL's think_format_reward
RM_BATCH = 8  # completions a reward model scores per forward
MATH_TIMEOUT_S = 5  # math-verify's own default per parse and per verify (signal.alarm: main thread only)


class RewardError(Exception):
    """A reward function that cannot be used or that failed; str(err) is the user's message:
    the entry (file and function), what happened and the record."""


@dataclass
class RewardFunction:
    """One entry of reward_funcs: ``name`` (a column's name), ``label`` (how a message names
    it: the built-in, FILE.py:FUNCTION, or the rm run) and ``fn`` (called TRL's way)."""

    name: str
    label: str
    fn: Callable[..., Any]
    user: bool = False  # a user's function: its result is checked value by value


def record_label(record: dict[str, Any]) -> str:
    return _("dataset {dataset} record {index}").format(dataset=record.get("dataset", "?"), index=record.get("record", "?"))


def records_label(records: list[dict[str, Any]], limit: int = 4) -> str:
    """The records of a batch, the first few named (a message stays one line)."""
    named = [record_label(r) for r in records[:limit]]
    more = len(records) - limit
    return ", ".join(named) + (_(" and {n} more").format(n=more) if more > 0 else "")


def _number(value: Any) -> float | None:
    """A reward value as a float (None stays None); ValueError for anything else."""
    if value is None:
        return None
    if hasattr(value, "item") and getattr(value, "ndim", None) == 0:  # a 0-d tensor or numpy array
        value = value.item()
    if isinstance(value, numbers.Real):
        return float(value)
    raise ValueError(type(value).__name__)


class Rewards:
    """The run's reward functions and weights; called on a batch of completions (see the module)."""

    def __init__(self, functions: list[RewardFunction], weights: list[float]):
        if len(weights) != len(functions):
            raise RewardError(_("reward_weights has {n} number(s) for {count} reward function(s); give one per function").format(
                n=len(weights), count=len(functions)))
        self.functions = functions
        self.names = unique_names([f.name for f in functions])
        self.weights = weights

    def __call__(self, prompts: list[str], completions: list[str], completion_ids: list[list[int]],
                 records: list[dict]) -> torch.Tensor:
        columns = {k: [r.get(k) for r in records] for k in dict.fromkeys(k for r in records for k in r) if k not in RESERVED}
        out = torch.empty(len(completions), len(self.functions), dtype=torch.float32)
        for j, function in enumerate(self.functions):
            values = self._call(function, prompts, completions, completion_ids, columns, records)
            out[:, j] = torch.tensor([math.nan if v is None else v for v in values], dtype=torch.float32)
        return out

    def _call(self, function: RewardFunction, prompts: list[str], completions: list[str], completion_ids: list[list[int]],
              columns: dict[str, list], records: list[dict]) -> list[float | None]:
        try:
            result = function.fn(prompts=prompts, completions=completions, completion_ids=completion_ids, **columns)
        except Exception as err:  # noqa: BLE001 (the user's code: any exception ends the run, named)
            if not function.user:
                raise
            raise RewardError(_("reward function {name} raised {error}: {message} on {records}").format(
                name=function.label, error=type(err).__name__, message=str(err).strip() or "-",
                records=records_label([records[i] for i in _raising(function, prompts, completions, completion_ids,
                                                                     columns)] or records))) from None
        if not function.user:
            return list(result)
        try:
            values = list(result) if not isinstance(result, (str, bytes, dict)) else None
        except TypeError:
            values = None
        if values is None or len(values) != len(completions):
            got = _("{n} value(s)").format(n=len(values)) if values is not None else type(result).__name__
            raise RewardError(_("reward function {name} returned {got} for {count} completion(s) ({records}); it must return "
                                "a list with one number (or None) per completion").format(
                name=function.label, got=got, count=len(completions), records=records_label(records)))
        numbers_out: list[float | None] = []
        for value, record in zip(values, records):
            try:
                number = _number(value)
            except ValueError as err:
                raise RewardError(_("reward function {name} returned a {kind} for {record}; return a number, or None to "
                                    "leave the completion unscored").format(name=function.label, kind=err, record=record_label(record))) from None
            if number is not None and not math.isfinite(number):
                raise RewardError(_("reward function {name} returned {value} for {record}; return a finite number, or None to "
                                    "leave the completion unscored").format(name=function.label, value=number, record=record_label(record)))
            numbers_out.append(number)
        return numbers_out


def _raising(function: RewardFunction, prompts: list[str], completions: list[str], completion_ids: list[list[int]],
             columns: dict[str, list]) -> list[int]:
    """The completions a function raises on when called on each alone (the record its message
    names); [] when each alone passes (the batch as a whole failed)."""
    if len(completions) == 1:
        return [0]
    for i in range(len(completions)):
        try:
            function.fn(prompts=prompts[i:i + 1], completions=completions[i:i + 1], completion_ids=completion_ids[i:i + 1],
                        **{k: v[i:i + 1] for k, v in columns.items()})
        except Exception:  # noqa: BLE001
            return [i]
    return []


def unique_names(names: list[str]) -> list[str]:
    """The names as columns: a repeated one gets _2, _3 ..."""
    out: list[str] = []
    for name in names:
        candidate, n = name, 1
        while candidate in out:
            n += 1
            candidate = f"{name}_{n}"
        out.append(candidate)
    return out


# --- The built-ins

def exact_reward(completions: list[str], reference: list[str | None], **_columns: Any) -> list[float | None]:
    """1 when the completion, stripped, is the reference, stripped; None without a reference."""
    return [None if ref is None else float(c.strip() == str(ref).strip()) for c, ref in zip(completions, reference)]


def format_reward(pattern: str) -> Callable[..., list[float]]:
    """1 when the whole completion matches ``pattern`` (dot matching newlines), else 0."""
    compiled = re.compile(pattern, re.DOTALL)

    def reward(completions: list[str], **_columns: Any) -> list[float]:
        return [float(compiled.fullmatch(c) is not None) for c in completions]
    return reward


def think_format_reward(completions: list[str], **_columns: Any) -> list[float]:
    """TRL's think_format_reward: one <think>...</think> at the very start, then anything."""
    return [float(THINK_PATTERN.match(c) is not None) for c in completions]


def length_reward(max_completion_length: int, cache: int) -> Callable[..., list[float]]:
    """DAPO's soft overlong punishment (TRL's get_soft_overlong_punishment), over completion
    tokens: 0 up to max - cache, then falling linearly to -1 at max, -1 beyond."""
    def reward(completion_ids: list[list[int]], **_columns: Any) -> list[float]:
        out = []
        for ids in completion_ids:
            n = len(ids)
            out.append(0.0 if n <= max_completion_length - cache else
                       (max_completion_length - cache - n) / cache if n <= max_completion_length else -1.0)
        return out
    return reward


def math_verify_available() -> bool:
    return importlib.util.find_spec("math_verify") is not None


def accuracy_reward(completions: list[str], reference: list[str | None], **_columns: Any) -> list[float | None]:
    """TRL's accuracy_reward: when the reference parses as maths (math-verify), 1 if the
    completion's first LaTeX answer (a \\boxed{} first) is equal to it, 0 if not, None when
    verifying failed; a reference that does not parse is compared as text (stripped,
    lower-cased), as TRL does. None without a reference."""
    from latex2sympy2_extended import NormalizationConfig
    from math_verify import LatexExtractionConfig, parse, verify

    # math-verify bounds parse and verify with signal.alarm, which works in the main thread only
    timeout = MATH_TIMEOUT_S if threading.current_thread() is threading.main_thread() else None
    answer_config = [LatexExtractionConfig(
        normalization_config=NormalizationConfig(nits=False, malformed_operators=False, basic_latex=True, boxed="all", units=True),
        boxed_match_priority=0, try_extract_without_anchor=False)]
    out: list[float | None] = []
    for content, ref in zip(completions, reference):
        if ref is None:
            out.append(None)
            continue
        gold = parse(str(ref), extraction_mode="first_match", parsing_timeout=timeout)
        if not gold:
            out.append(float(content.strip().lower() == str(ref).strip().lower()))
            continue
        answer = parse(content, extraction_config=answer_config, extraction_mode="first_match", parsing_timeout=timeout)
        try:
            out.append(float(verify(gold, answer, timeout_seconds=timeout)))
        except Exception:  # noqa: BLE001 (TRL: an answer that cannot be verified is left unscored)
            out.append(None)
    return out


def builtin(name: str, options: dict[str, Any], max_completion_length: int | None) -> Callable[..., Any]:
    if name == "accuracy":
        if not math_verify_available():
            raise RewardError(_("reward accuracy needs the math-verify package: {install} (or use reward exact: the stripped "
                                "text equal to the reference)").format(install=RL_EXTRA_INSTALL))
        return accuracy_reward
    if name == "exact":
        return exact_reward
    if name == "format":
        try:
            return format_reward(str(options["format_pattern"]))
        except re.error as err:
            raise RewardError(_("format_pattern is not a regular expression: {error}").format(error=err)) from None
    if name == "think_format":
        return think_format_reward
    if not max_completion_length:
        raise RewardError(_("reward length needs max_completion_length"))
    cache = int(options["soft_punish_cache"])
    if not 0 < cache <= max_completion_length:
        raise RewardError(_("soft_punish_cache ({cache}) must be between 1 and max_completion_length ({max})").format(
            cache=cache, max=max_completion_length))
    return length_reward(int(max_completion_length), cache)


# --- A user's function

def load_user_function(entry: str) -> RewardFunction:
    """``FILE.py:FUNCTION`` imported from the file (relative to the current directory, as the
    run's other paths), its folder on sys.path so that it may import its neighbours."""
    file_text, name = split_function_entry(entry)
    path = Path(file_text).expanduser()
    path = path if path.is_absolute() else Path.cwd() / path
    label = f"{file_text}:{name}"
    if not path.is_file():
        raise RewardError(_("reward file {file} does not exist (reward_funcs {entry}; a path relative to {cwd})").format(
            file=file_text, entry=entry, cwd=Path.cwd()))
    module_name = "ftui_reward_" + hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:12]
    module = sys.modules.get(module_name)
    if module is None:
        spec = importlib.util.spec_from_file_location(module_name, path)
        if spec is None or spec.loader is None:
            raise RewardError(_("reward file {file} cannot be imported: give a .py file").format(file=file_text))
        module = importlib.util.module_from_spec(spec)
        if str(path.parent) not in sys.path:
            sys.path.append(str(path.parent))
        try:
            spec.loader.exec_module(module)
        except Exception as err:  # noqa: BLE001 (the user's module, run on import)
            raise RewardError(_("reward file {file} failed on import: {error}: {message}").format(
                file=file_text, error=type(err).__name__, message=str(err).strip() or "-")) from None
        sys.modules[module_name] = module
    fn = getattr(module, name, None)
    if not callable(fn):
        raise RewardError(_("reward file {file} has no function {name}").format(file=file_text, name=name))
    return RewardFunction(name, label, fn, user=True)


# --- A reward model from an rm run

class RewardModelScorer:
    """An ``rm`` run's reward model, frozen on ``device``, scoring prompt + completion as text
    (its own tokenizer, no special tokens added, right padded): the value at the last token,
    as TRL's GRPO scores with a reward model."""

    def __init__(self, run_dir: Path, device: Any, dtype: torch.dtype = torch.float32):
        from transformers import AutoTokenizer

        from ftui.config.load import read_run_config
        from ftui.runner.reward import VALUE_HEAD_FILE, install_value_head, load_value_head
        from ftui.runner.weights import WeightsError, load_weights, locate

        try:
            cfg = read_run_config(run_dir / "config.yaml")
            weights = locate(run_dir, cfg)
            model = load_weights(weights, cfg, dtype, value_head=True)  # the head itself stays fp32
        except (OSError, ValueError, WeightsError) as err:
            raise RewardError(_("reward model {run} cannot be loaded: {error}").format(run=run_dir, error=err)) from None
        if not weights.from_checkpoint:  # final/: the model (an adapter merged) and the head in its own file
            if hasattr(model, "merge_and_unload"):
                model = model.merge_and_unload()
            install_value_head(model, load_value_head(weights.path / VALUE_HEAD_FILE))
        self.model = model.to(device).eval().requires_grad_(False)
        self.device = device
        self.tokenizer = AutoTokenizer.from_pretrained(weights.tokenizer, trust_remote_code=cfg.trust_remote_code)
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.tokenizer.padding_side = "right"

    def __call__(self, prompts: list[str], completions: list[str], **_columns: Any) -> list[float]:
        from ftui.runner.reward import score

        out: list[float] = []
        texts = [p + c for p, c in zip(prompts, completions)]
        for at in range(0, len(texts), RM_BATCH):
            enc = self.tokenizer(texts[at:at + RM_BATCH], return_tensors="pt", padding=True, add_special_tokens=False)
            out += score(self.model, enc["input_ids"].to(self.device), enc["attention_mask"].to(self.device)).tolist()
        return out


# --- The run's rewards

def reward_option_values(cfg: Any) -> dict[str, Any]:
    """The reward options' values and the stage's max_completion_length (the length reward's
    end): a RunConfig's at its stage's defaults where unset, or a plain mapping's."""
    if isinstance(cfg, dict):
        return {**{o.key: cfg.get(o.key, o.default) for o in REWARD_OPTIONS}, "max_completion_length": cfg.get("max_completion_length")}
    from ftui.stages import find as find_stage

    stage = find_stage(getattr(cfg, "stage", ""))
    values = stage.option_values(cfg) if stage is not None else {}
    out = {o.key: values.get(o.key, getattr(cfg, o.key, o.default)) for o in REWARD_OPTIONS}
    return {**out, "max_completion_length": values.get("max_completion_length", getattr(cfg, "max_completion_length", None))}


def score_dtype(cfg: Any) -> torch.dtype:
    """A reward model's weights in the run's half precision (bf16 / fp16) when it has one, else fp32."""
    get = cfg.get if isinstance(cfg, dict) else lambda key, default: getattr(cfg, key, default)
    return torch.bfloat16 if get("bf16", False) else torch.float16 if get("fp16", False) else torch.float32


def load_rewards(cfg: Any, tokenizer: Any, device: Any) -> Rewards:
    """The run's reward functions (``reward_funcs``), each ready to call, and their weights
    (``reward_weights``, all 1 when empty). ``tokenizer`` is the policy's (the built-ins read
    token ids as given); a reward model brings its own. RewardError names a bad entry."""
    options = reward_option_values(cfg)
    max_len = options["max_completion_length"]
    entries = reward_entries(options["reward_funcs"])
    if not entries:
        raise RewardError(_("reward_funcs is empty: name at least one reward function ({builtins}, FILE.py:FUNCTION or an rm "
                            "run)").format(builtins=", ".join(BUILTIN_REWARDS)))
    functions = []
    for entry in entries:
        kind = entry_kind(entry)
        if kind == "builtin":
            functions.append(RewardFunction(entry, entry, builtin(entry, options, max_len)))
        elif kind == "function":
            functions.append(load_user_function(entry))
        else:
            run_dir = Path(entry).expanduser()
            functions.append(RewardFunction(run_dir.resolve().name, entry, RewardModelScorer(run_dir, device, score_dtype(cfg))))
    try:
        weights = reward_weight_values(options["reward_weights"]) or [1.0] * len(functions)
    except ValueError as err:
        raise RewardError(_("reward_weights: {entry} is not a number").format(entry=repr(str(err)))) from None
    return Rewards(functions, weights)
