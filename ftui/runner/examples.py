"""``python -m ftui.runner data CONFIG.yaml [--limit N] [--text]``: a config's training
examples exactly as a run encodes them, one JSON object a line on stdout, for ``ftui data``
and the launch form's preview (both torch-free, so they start this).

The config's stage builds them with its own ``build_data``, as training does, and they come
out in dataset order: before the sampler shuffles them and before packing. Examples held
out for eval (``val_size``) are left out. Each line is ``{"input_ids": [...], "labels":
[...]}`` (-100 where no loss is taken); the preference stages' examples have LLaMA-Factory's
columns (``chosen_input_ids``, ``rejected_labels``, ...; KTO's ``kl_input_ids`` and
``kto_tags``). With ``--text`` each part also has its ``segments``, its text cut where the
mask changes (``[text, masked]`` pairs), a run of one special token (an image's
``<|image_pad|>`` tokens) written once with its count: ``<|image_pad|> x 64``. Messages go to stderr.
Exit codes: 0; 2 a config or dataset to fix; 1 anything else (the hub, the tokenizer).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from typing import Any

from ftui.config.problems import ConfigError
from ftui.config.load import read_run_config
from ftui.data.examples import ROW_PREFIXES
from ftui.i18n import _
from ftui.data.records import DataFormatError
from ftui.runner.data import IGNORE, example_columns
from ftui.runner.hub import HubProblem
from ftui.runner.model import load_tokenizer
from ftui.runner.stages import make_stage


# Two or more of the same <|...|> token in a row: an image's tokens, shown once with their count.
REPEATED_SPECIAL = re.compile(r"(<\|[^|<>\s]{1,40}\|>)\1+")


def collapse_repeats(text: str) -> str:
    """``<|vision_start|><|image_pad|><|image_pad|>...<|vision_end|>`` as
    ``<|vision_start|><|image_pad|> x 64 <|vision_end|>``: where the image sits, not 64 repeats."""

    def one(m: re.Match[str]) -> str:
        count = len(m.group(0)) // len(m.group(1))
        return f"{m.group(1)} x {count}" + ("" if m.end() == len(text) else " ")

    return REPEATED_SPECIAL.sub(one, text)


def masked_segments(tokenizer: Any, ids: list[int], labels: list[int]) -> list[list[Any]]:
    """[text, masked] runs of one example. Each run's text is what decoding up to its end adds
    to decoding up to its start, so a run that starts inside a word keeps its spacing; runs of
    one special token are collapsed (``collapse_repeats``)."""
    ends = [k for k in range(1, len(ids)) if (labels[k] == IGNORE) != (labels[k - 1] == IGNORE)] + [len(ids)]
    out, start, before = [], 0, ""
    for end in ends:
        text = tokenizer.decode(ids[:end], skip_special_tokens=False, clean_up_tokenization_spaces=False)
        piece = text[len(before):] if text.startswith(before) else tokenizer.decode(
            ids[start:end], skip_special_tokens=False, clean_up_tokenization_spaces=False)
        out.append([collapse_repeats(piece), labels[start] == IGNORE])
        start, before = end, text
    return out


def say(kind: str, text: str) -> None:
    """One of this process's own lines on stderr: ``kind`` (ftui data, hint, warning, note)
    stays in English, as ftui.data.examples tells these lines from the libraries' output by it;
    ``text`` is already in the user's language."""
    print(f"{kind}: {text}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ftui.runner data")
    parser.add_argument("config")
    parser.add_argument("--limit", type=int, default=None, help=_("the first N examples only"))
    parser.add_argument("--text", action="store_true", help=_("add each example's text, cut where the mask changes"))
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    # stdout carries the examples only: whatever a library prints goes to stderr
    out = os.fdopen(os.dup(sys.stdout.fileno()), "w", encoding="utf-8")
    sys.stdout.flush()
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    try:
        cfg = read_run_config(args.config)  # written by the app from a config it checked: its schema only
        tokenizer = load_tokenizer(cfg)
        data = make_stage(cfg, tokenizer).build_data(pack=False)
    except (ConfigError, DataFormatError) as err:
        say("ftui data", str(err))
        return 2
    except HubProblem as err:
        say("ftui data", str(err))
        say("hint", err.hint)
        return 1
    except OSError as err:  # transformers' own for a tokenizer it cannot load
        say("ftui data", f"{type(err).__name__}: {err}")
        return 1
    except (RecursionError, UnicodeDecodeError) as err:  # a parser a dataset or tokenizer file defeated: the file is to fix
        say("ftui data", _("cannot read the data: {error}").format(error=f"{type(err).__name__}: {err}"))
        return 2
    except MemoryError:
        say("ftui data", _("ran out of memory reading the data; give a smaller dataset or max_samples"))
        return 1
    for warning in data.warnings:
        say("warning", warning)
    if data.eval:
        say("note", _("{n} examples held out for eval (val_size) are not included").format(n=len(data.eval)))
    for example in data.train[: args.limit]:
        row = example_columns(example)
        if args.text:
            for prefix in ROW_PREFIXES:
                if f"{prefix}input_ids" in row:
                    row[f"{prefix}segments"] = masked_segments(tokenizer, row[f"{prefix}input_ids"], row[f"{prefix}labels"])
        out.write(json.dumps(row, ensure_ascii=False) + "\n")
    out.close()
    return 0
