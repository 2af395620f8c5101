"""Which rollouts a reader shows, in what order: the rollout browser's and ``ftui rollouts
--print``'s one rule. A search is words to find in the prompt or the completion (case does
not matter), with ``step:N`` or ``step:N-M`` narrowing it to those steps."""

from __future__ import annotations

import re
from typing import Any, Sequence

from ftui.i18n import N_

# The orders, in the browser's cycle (key s): the newest step first, then by step, the highest
# reward first, the lowest first (a row without a reward last in both).
SORTS = ("newest", "step", "reward", "low-reward")
SORT_WORDS = {"newest": N_("newest step first"), "step": N_("step"), "reward": N_("reward, highest first"),
              "low-reward": N_("reward, lowest first")}
_STEP = re.compile(r"^step:(\d{1,12})(?:-(\d{1,12}))?$", re.IGNORECASE)


def rollout_key(row: dict[str, Any]) -> tuple[int, int, int, int]:
    return row["step"], row["generation"], row["group"], row["sample"]


def latest(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each rollout once, as last written, in the place it first had: a resumed run generates
    the rollouts of the steps after its checkpoint again (the same ones: its data order and
    seeds are the run's) and appends them to the same file."""
    at: dict[tuple[int, int, int, int], int] = {}
    out: list[dict[str, Any]] = []
    for row in rows:
        key = rollout_key(row)
        if key in at:
            out[at[key]] = row
        else:
            at[key] = len(out)
            out.append(row)
    return out


def parse_query(query: str) -> tuple[tuple[int, int] | None, str]:
    """``query`` as (the steps it keeps, first and last, or None for all; the words to find)."""
    steps, words = None, []
    for token in query.split():
        m = _STEP.match(token)
        if m:
            first = int(m.group(1))
            steps = (first, int(m.group(2) or first))
        else:
            words.append(token)
    return steps, " ".join(words).casefold()


def matches(row: dict[str, Any], steps: tuple[int, int] | None, words: str) -> bool:
    if steps is not None and not steps[0] <= row["step"] <= steps[1]:
        return False
    return not words or words in row["prompt"].casefold() or words in row["completion"].casefold()


def sort_key(sort: str):
    """A key for (position, row) pairs; ties keep the file's order (group, then sample)."""
    def key(item: tuple[int, dict[str, Any]]) -> tuple:
        at, row = item
        reward = row.get("reward")
        if sort == "newest":
            return (-row["step"], at)
        if sort == "step":
            return (row["step"], at)
        if reward is None:
            return (1, 0.0, at)
        return (0, -reward if sort == "reward" else reward, at)
    return key


def select(rows: Sequence[dict[str, Any]], query: str = "", sort: str = "newest", step: int | None = None) -> list[int]:
    """The positions in ``rows`` of those ``query`` (and ``step``) keep, in ``sort``'s order."""
    steps, words = parse_query(query)
    if step is not None:
        steps = (step, step)
    kept = [(at, row) for at, row in enumerate(rows) if matches(row, steps, words)]
    return [at for at, _row in sorted(kept, key=sort_key(sort))]
