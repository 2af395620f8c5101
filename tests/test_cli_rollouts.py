"""``ftui rollouts RUN`` (--print, --json, --step, --sort, --search, --limit; the browser by
default) and ``ftui watch``'s reward line for a grpo run's step events (issue 43)."""

from __future__ import annotations

import io
import json
import subprocess
import sys

from ftui.cli.parser import build_parser
from tests.fixtures_runs import write_run
from tests.rollout_runs import HOSTILE_MARKUP, LONG_COMPLETION, ROWS, write_grpo_run

FTUI = [sys.executable, "-m", "ftui.cli.main"]


def ftui(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*FTUI, *args], capture_output=True, text=True, timeout=60)


def test_print_sorted_by_reward_literally(tmp_path):
    root = tmp_path / "runs"
    write_grpo_run(root)
    proc = ftui("rollouts", "qwen-grpo", "--root", str(root), "--print", "--sort", "reward", "--limit", "3")
    assert proc.returncode == 0, proc.stderr
    heads = [line for line in proc.stdout.splitlines() if line.startswith("── ")]
    assert len(heads) == 3
    assert heads[0].startswith("── step 1 · generation 0 · group 0 · sample 0 · reward 1.500 (accuracy 1.000 format 0.500)")
    assert "advantage +0.500 · 4 tokens" in heads[0] and "reward 0.500" in heads[2]
    assert "prompt:\nWhat is 0 + 0?\nreference:\n0\ncompletion:\nThe answer is 0\n" in proc.stdout


def test_print_shows_escapes_and_markup_as_text_and_a_long_completion_whole(tmp_path):
    root = tmp_path / "runs"
    write_grpo_run(root)
    proc = ftui("rollouts", "qwen-grpo", "--root", str(root), "--print", "--step", "2")
    assert proc.returncode == 0, proc.stderr
    assert HOSTILE_MARKUP in proc.stdout and "\\x1b[31mred" in proc.stdout and "\x1b" not in proc.stdout and "\r" not in proc.stdout
    assert proc.stdout.count("── step 2") == 2 and "step 1 " not in proc.stdout
    long = ftui("rollouts", "qwen-grpo", "--root", str(root), "--print", "--step", "3", "--search", "99999")
    assert LONG_COMPLETION in long.stdout and "(cut at max_completion_length)" in long.stdout and "256 tokens" in long.stdout


def test_json_lines_are_the_validated_rows(tmp_path):
    root = tmp_path / "runs"
    run = write_grpo_run(root)
    with open(run / "rollouts.jsonl", "a") as fh:
        fh.write('{"step": "x"}\n')
    proc = ftui("rollouts", str(run), "--json", "--sort", "step", "--limit", "100")
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [r["completion"] for r in rows] == [r["completion"] for r in ROWS]
    assert rows[3]["reward"] is None and rows[0]["rewards"] == {"accuracy": 1.0, "format": 0.5} and rows[0]["cut"] is False
    assert proc.stdout.isascii() and "1 lines skipped (not rollouts)" in proc.stderr


def test_errors_say_what_to_do(tmp_path):
    root = tmp_path / "runs"
    write_run(root, "sft-1", steps=3, max_steps=3, end="completed")
    write_grpo_run(root)
    none = ftui("rollouts", "sft-1", "--root", str(root), "--print")
    assert none.returncode == 1 and "sft-1 has no rollouts: grpo and ppo runs write them" in none.stderr
    missing = ftui("rollouts", "nope", "--root", str(root), "--print")
    assert missing.returncode == 2 and "no run 'nope'" in missing.stderr
    limit = ftui("rollouts", "qwen-grpo", "--root", str(root), "--print", "--limit", "0")
    assert limit.returncode == 2 and "--limit" in limit.stderr
    nothing = ftui("rollouts", "qwen-grpo", "--root", str(root), "--print", "--search", "no such text")
    assert nothing.returncode == 0 and "no rollouts match (of 6)" in nothing.stderr and nothing.stdout == ""
    both = ftui("rollouts", "qwen-grpo", "--root", str(root), "--print", "--json")
    assert both.returncode == 2 and "not allowed with" in both.stderr


def test_help_lists_rollouts_and_its_options():
    out = ftui("--help").stdout
    assert "rollouts" in out and "a grpo or ppo run's rollouts" in out
    assert "mean reward for grpo" in " ".join(out.split())  # ftui eval of a grpo run: its reward functions' mean
    sub = ftui("rollouts", "--help").stdout
    for option in ("--print", "--json", "--step N", "--sort", "--limit N", "--search TEXT", "--root RUNS_ROOT"):
        assert option in sub
    import ftui.cli.main as main

    assert "ftui rollouts RUN" in main.__doc__


def test_without_print_it_opens_the_browser_on_the_run(tmp_path, monkeypatch):
    import ftui.cli.app as app_cli
    from ftui.cli.rollouts import cmd_rollouts

    root = tmp_path / "runs"
    run = write_grpo_run(root)
    opened = []
    monkeypatch.setattr(app_cli, "open_rollouts_app", lambda *a: opened.append(a) or 0)
    args = build_parser().parse_args(["rollouts", "qwen-grpo", "--root", str(root), "--step", "2", "--sort", "low-reward",
                                      "--search", "answer"])
    assert cmd_rollouts(args) == 0
    assert opened == [(run, str(root), "answer step:2", "low-reward")]


def test_watch_prints_a_grpo_runs_reward_line(tmp_path):
    from ftui.cli.watch import watch_run

    root = tmp_path / "runs"
    run = write_grpo_run(root, steps=20, end="completed")
    out = io.StringIO()
    assert watch_run(run, interval=0.01, out=out) == "completed"
    lines = out.getvalue().splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("step 20/100 loss"))
    assert "reward" not in lines[at] and "kl" not in lines[at]  # on the line below, readable
    assert lines[at + 1] == ("  reward 0.6321 ± 0.3 (accuracy 0.6321, format 0.5) · length 12.5 (25% cut) · "
                             "zero-spread groups 50% · kl 0.0012 · entropy 1.25 · clip_ratio 0")
