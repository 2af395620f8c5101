"""``ftui rollouts RUN``: a grpo or ppo run's rollouts (its completions, their rewards). The
rollout browser in the app by default; ``--print`` (readable lines) and ``--json`` (one row a
line, as the rollouts file holds it, validated) for scripts and terminals without the app.
``--step``, ``--sort``, ``--search`` and ``--limit`` choose the rows, in the browser too."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TextIO

from ftui.cli.console import EXIT_FAILED, EXIT_OK, EXIT_USAGE, error_line, note_line, safe_console, warning_line
from ftui.cli.runs import resolve_run_arg
from ftui.i18n import _
from ftui.rundir.rollout_query import latest, select
from ftui.rundir.rollouts import OLDER_FILE, ROLLOUTS_FILE, RolloutTail
from ftui.safety.text import VisibleWriter, visible


def cmd_rollouts(args: argparse.Namespace, out: TextIO | None = None) -> int:
    err = safe_console(stderr=True)
    if args.limit is not None and args.limit < 1:
        err.print(error_line(_("--limit takes a number of rollouts, 1 or more")))
        return EXIT_USAGE
    run_dir = resolve_run_arg(args.run, args.root, err)
    if run_dir is None:
        return EXIT_USAGE
    query = " ".join(filter(None, [args.search or "", f"step:{args.step}" if args.step is not None else ""]))
    if not (args.print or args.json):
        from ftui.cli.app import open_rollouts_app

        return open_rollouts_app(run_dir, args.root, query, args.sort)
    if not (run_dir / ROLLOUTS_FILE).is_file() and not (run_dir / OLDER_FILE).is_file():
        err.print(error_line(_("{run} has no rollouts: grpo and ppo runs write them ({file}) from their first generation on").format(
            run=run_dir.name, file=ROLLOUTS_FILE)))
        return EXIT_FAILED
    tail = RolloutTail(run_dir)
    rows = latest(tail.poll()[0])
    if tail.problem:
        err.print(warning_line(tail.problem))
    if tail.skipped:
        err.print(note_line(_("{count} lines skipped (not rollouts)").format(count=tail.skipped)))
    chosen = [rows[at] for at in select(rows, query, args.sort)][: args.limit or 20]
    if not chosen:
        err.print(note_line(_("no rollouts match (of {count})").format(count=len(rows))))
        return EXIT_OK
    out = out or sys.stdout
    if args.json:  # ASCII JSON: no control or bidi character reaches the terminal
        for row in chosen:
            print(json.dumps(row, ensure_ascii=True), file=out, flush=True)
        return EXIT_OK
    writer = VisibleWriter(out)
    for row in chosen:
        print_rollout(row, writer)
    return EXIT_OK


def headline(row: dict) -> str:
    """One rollout's figures on a line: where it is, its reward (each function's), advantage, length."""
    parts = [_("step {step} · generation {generation} · group {group} · sample {sample}").format(
        step=row["step"], generation=row["generation"], group=row["group"], sample=row["sample"])]
    rewards = " ".join(f"{name} {'-' if v is None else f'{v:.3f}'}" for name, v in row["rewards"].items())
    reward = "-" if row["reward"] is None else f"{row['reward']:.3f}"
    parts.append(_("reward {reward}").format(reward=reward) + (f" ({rewards})" if rewards else ""))
    parts.append(_("advantage {advantage}").format(advantage=f"{row['advantage']:+.3f}"))
    parts.append(_("{count} tokens").format(count=row["length"]) + (" " + _("(cut at max_completion_length)") if row["truncated"] else ""))
    return " · ".join(parts)


def print_rollout(row: dict, out: TextIO) -> None:
    """A rollout for a reader: its headline, then its prompt, reference and completion whole,
    literally (``out`` shows control characters as escapes)."""
    print("── " + headline(row), file=out)
    for label, text in ((_("prompt"), row["prompt"]), (_("reference"), row["reference"]), (_("completion"), row["completion"])):
        if text is None:
            continue
        print(f"{label}:", file=out)
        print(visible(text), file=out)
    if row["cut"]:
        print(_("(texts cut in the rollouts file)"), file=out)
    print(file=out, flush=True)
