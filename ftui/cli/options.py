"""Reading option values the way every command does: ``--set KEY=VALUE`` pairs and the
argparse types of numbers and devices."""

from __future__ import annotations

import argparse
import re
from typing import Any

import yaml

from ftui.cli.console import EXIT_USAGE, error_line, safe_console
from ftui.i18n import _
from ftui.safety.bounded_input import YAMLRefused, load_yaml, short_repr


def parse_set(items: list[str]) -> dict[str, Any]:
    """--set KEY=VALUE pairs, each value read as YAML (max_steps=10 is a number); a malformed
    one ends the command with exit 2, saying which."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        problem = None
        if not sep or not key.strip():
            problem = _("--set expects key=value, got {item}").format(item=short_repr(item))
        else:
            try:
                out[key.strip()] = load_yaml(value)
            except YAMLRefused as e:
                problem = _("--set {key}: {value} is refused: {reason}").format(key=key.strip(), value=short_repr(value), reason=e)
            except yaml.YAMLError as e:
                where = getattr(e, "problem", None) or str(e).splitlines()[0]
                problem = _("--set {key}: {value} is not a YAML value ({reason}); quote it as a string, e.g. {key}='\"...\"'").format(
                    key=key.strip(), value=short_repr(value), reason=where)
        if problem:
            safe_console(stderr=True).print(error_line(problem))
            raise SystemExit(EXIT_USAGE)
    return out



def chat_device(text: str) -> str:
    """An argparse type: auto, cpu, cuda or cuda:N (a torch device string would fail later,
    inside the model's process, in torch's words)."""
    if text in ("auto", "cpu", "cuda") or re.fullmatch(r"cuda:\d{1,2}", text):
        return text
    raise argparse.ArgumentTypeError(_("{value}: use auto, cpu, cuda or cuda:N").format(value=repr(text)))


def positive(text: str) -> float:
    """An argparse type: a finite number above 0 (an interval, a memory size)."""
    import math

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(_("{value} is not a number").format(value=repr(text))) from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(_("{value} must be a number above 0").format(value=repr(text)))
    return value



def sampling_ok(temperature: float, top_p: float) -> bool:
    """Temperature 0 or more, top-p in (0, 1]; NaN fails both (written so that it does)."""
    return temperature >= 0 and 0 < top_p <= 1
