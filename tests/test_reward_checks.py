"""The reward checks before a run starts (ftui.config.reward_checks): each problem of the reward
keys refused by name with what to do, through the preflight the launch form and ``ftui train``
share. The stage is a test's own with the reward options (as grpo lists them), so these run
whichever stages exist; the CLI test runs ``stage: grpo`` once it is registered."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
import yaml

import ftui.stages
from ftui.config import reward_checks
from ftui.config.schema import RunConfig

REWARD_STAGE = '''
    """A test's stage that learns from rewards: the reward options, as grpo lists them."""
    from ftui.stages import CONVERSATIONS, StageDescription, StageOption
    from ftui.stages.reward_options import REWARD_OPTIONS

    DESCRIPTION = StageDescription(
        name="rewardtoy", order=95, short="rewardtoy (a test's stage)", help="rewardtoy: rewards", data=CONVERSATIONS,
        options=(StageOption("max_completion_length", "completion tokens", "most tokens a completion has", 16, int, ge=1),
                 *REWARD_OPTIONS),
    )
'''


@pytest.fixture
def reward_stage(tmp_path, monkeypatch):
    folder = tmp_path / "described"
    folder.mkdir()
    (folder / "rewardtoy.py").write_text(textwrap.dedent(REWARD_STAGE))
    monkeypatch.setattr(ftui.stages, "__path__", [*ftui.stages.__path__, str(folder)])
    ftui.stages.refresh()
    yield
    monkeypatch.undo()
    ftui.stages.refresh()
    sys.modules.pop("ftui.stages.rewardtoy", None)


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """The current directory (reward files are relative to it), with a reward file and an
    alpaca dataset whose records have their answers."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine.py").write_text("import math\n\ndef score(completions, **kw):\n    return [1.0] * len(completions)\n\n"
                                      "async def later(completions, **kw):\n    return []\n\nalias = score\n")
    (tmp_path / "answers.json").write_text(json.dumps([{"instruction": f"{i}+1?", "output": str(i + 1)} for i in range(3)]))
    return tmp_path


def config(stage="rewardtoy", **keys):
    data = {"model_name_or_path": "ftui-demo", "model_init": "random", "stage": stage, "dataset": "answers.json",
            "finetuning_type": "full", "template": "default", "cutoff_len": 64, "max_steps": 1, **keys}
    return data


def problems(**keys):
    return [(p.field, p.message) for p in reward_checks.reward_config_problems(RunConfig.model_validate(config(**keys)))]


def test_no_reward_checks_for_a_stage_without_rewards(workdir):
    assert reward_checks.reward_config_problems(RunConfig.model_validate(config(stage="sft", reward_funcs="nope"))) == []


def test_good_reward_entries_pass(reward_stage, workdir):
    assert problems(reward_funcs="exact, format, think_format, length, mine.py:score, mine.py:alias",
                    reward_weights="1,1,0.5,1,2,1", max_completion_length=128) == []
    assert problems(reward_funcs=["exact", "mine.py:score"], reward_weights=[1, 2]) == []


@pytest.mark.parametrize("keys, field, message", [
    (dict(reward_funcs=""), "reward_funcs", "name at least one reward function: accuracy, exact, format"),
    (dict(reward_funcs="exactly"), "reward_funcs", "exactly is not a built-in reward (accuracy, exact, format, think_format, "
                                                   "length), FILE.py:FUNCTION or an rm run's directory"),
    (dict(reward_funcs="gone.py:score"), "reward_funcs", "reward file gone.py does not exist (a path relative to the current "
                                                         "directory"),
    (dict(reward_funcs="answers.json:score"), "reward_funcs", "answers.json:score: a reward function is FILE.py:FUNCTION"),
    (dict(reward_funcs="mine.py"), "reward_funcs", "mine.py: name the function after the file: mine.py:FUNCTION"),
    (dict(reward_funcs="mine.py:scores"), "reward_funcs", "reward file mine.py has no top-level function scores"),
    (dict(reward_funcs="mine.py:later"), "reward_funcs", "later in mine.py is async"),
    (dict(reward_funcs="exact,format", reward_weights="1"), "reward_weights", "1 weight(s) for 2 reward function(s)"),
    (dict(reward_funcs="exact", reward_weights="1,heavy"), "reward_weights", "'heavy' is not a number"),
    (dict(reward_funcs="format", format_pattern="(<think>"), "format_pattern", "not a regular expression"),
    (dict(reward_funcs="length", soft_punish_cache=32), "soft_punish_cache", "longer than max_completion_length (16)"),
])
def test_each_reward_problem_names_its_key(reward_stage, workdir, keys, field, message):
    found = problems(**keys)
    assert len(found) == 1 and found[0][0] == field and message in found[0][1], found


def test_the_runner_reads_the_stages_max_completion_length_for_the_length_reward(reward_stage, workdir):
    from ftui.runner.rewards import RewardError, load_rewards

    with pytest.raises(RewardError, match=r"soft_punish_cache \(64\) must be between 1 and max_completion_length \(16\)"):
        load_rewards(RunConfig.model_validate(config(reward_funcs="length")), None, "cpu")
    rewards = load_rewards(RunConfig.model_validate(config(reward_funcs="length", soft_punish_cache=4)), None, "cpu")
    out = rewards(["p"] * 3, ["a"] * 3, [[0] * 12, [0] * 14, [0] * 17], [{"reference": None, "record": i, "dataset": "d"}
                                                                       for i in range(3)])
    assert out[:, 0].tolist() == [0.0, -0.5, -1.0]


def test_a_reward_file_that_does_not_parse_is_named_with_its_line(reward_stage, workdir):
    (workdir / "bad.py").write_text("def score(:\n")
    [(field, message)] = problems(reward_funcs="bad.py:score")
    assert field == "reward_funcs" and message.startswith("reward file bad.py is not valid Python:") and "(line 1)" in message


def test_accuracy_without_math_verify_is_refused_with_the_pip_command(reward_stage, workdir, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "math_verify" else real(name, *a))
    [(field, message)] = problems()  # reward_funcs defaults to accuracy
    assert field == "reward_funcs" and "reward accuracy needs the math-verify package: pip install 'ftui[rl]'" in message


def test_a_reward_model_must_be_a_trained_rm_run_on_this_template(reward_stage, workdir):
    run = workdir / "runs" / "some-run"
    (run / "final").mkdir(parents=True)
    (run / "config.yaml").write_text(yaml.safe_dump({"stage": "sft", "template": "default"}))
    [(_field, message)] = problems(reward_funcs=str(run))
    assert message == f"{run} is a sft run, not an rm run: a reward model is trained with stage rm"
    (run / "config.yaml").write_text(yaml.safe_dump({"stage": "rm", "template": "default"}))
    [(_field, message)] = problems(reward_funcs=str(run))
    assert "has no final/ value head nor checkpoint yet: train it first" in message
    (run / "final" / "value_head.safetensors").write_bytes(b"")
    assert problems(reward_funcs=str(run)) == []
    (run / "config.yaml").write_text(yaml.safe_dump({"stage": "rm", "template": "qwen"}))
    [(_field, message)] = problems(reward_funcs=str(run))
    assert "was trained on template qwen, this run's prompts use default" in message
    (run / "config.yaml").write_text(":\n  - [")
    [(_field, message)] = problems(reward_funcs=str(run))
    assert "is not an ftui run (no readable config.yaml)" in message


def test_preflight_refuses_a_dataset_without_the_reference_a_reward_compares_with(reward_stage, workdir):
    from ftui.config.preflight import preflight

    conversations = [{"conversations": [{"from": "human", "value": "2+2?"}, {"from": "gpt", "value": "4"}]},
                     {"conversations": [{"from": "human", "value": "3+3?"}, {"from": "gpt", "value": "  "}]}]
    (workdir / "chat.json").write_text(json.dumps(conversations))
    ready = preflight(config(reward_funcs="exact", dataset="answers.json"))
    assert ready.ready, ready.problems
    verdict = preflight(config(reward_funcs="format,exact", dataset="chat.json"))
    assert [p.field for p in verdict.problems] == ["dataset"]
    assert "reward exact compares with the reference answer, and dataset 'chat.json' record 1 has none" in verdict.problems[0].message
    assert preflight(config(reward_funcs="format", dataset="chat.json")).ready  # format reads no reference
    verdict = preflight(config(reward_funcs="mine.py:nothing"))
    assert [(p.field, p.message) for p in verdict.problems] == [("reward_funcs", "reward file mine.py has no top-level function nothing")]


@pytest.mark.skipif("grpo" not in ftui.stages.stage_names(), reason="stage grpo is not registered yet (grpo-core's ftui/stages/grpo.py)")
def test_ftui_train_grpo_exits_2_naming_a_missing_reward_file(workdir):
    path = workdir / "grpo.yaml"
    path.write_text(yaml.safe_dump(config(stage="grpo", reward_funcs="mine.py:score,missing.py:score")))
    out = subprocess.run([sys.executable, "-m", "ftui.cli.main", "train", str(path)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "reward_funcs" in out.stderr and "reward file missing.py does not exist" in out.stderr, out.stderr
