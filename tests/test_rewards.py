"""The reward functions of the stages that learn from rewards (ftui.runner.rewards): the
built-ins, a user's function called TRL's way, the messages of a function that fails, and a
reward model from an rm run's final/ folder."""

from __future__ import annotations

import math
import textwrap

import pytest
import torch

from ftui.runner.rewards import (RewardError, accuracy_reward, exact_reward, format_reward, length_reward,
                                 load_rewards, math_verify_available, think_format_reward, unique_names)
from ftui.stages.reward_options import DEFAULT_FORMAT_PATTERN, entry_kind, reward_entries, reward_weight_values

needs_math_verify = pytest.mark.skipif(not math_verify_available(), reason="needs math-verify (pip install 'ftui[rl]')")


def records(*refs, dataset="maths"):
    return [{"reference": ref, "record": i, "dataset": dataset, "solution": f"s{i}"} for i, ref in enumerate(refs)]


def call(rewards, completions, refs, ids=None):
    recs = records(*refs)
    return rewards([f"q{i}" for i in range(len(completions))], completions, ids or [[1, 2]] * len(completions), recs)


# --- Parsing the options

def test_reward_entries_and_weights_read_comma_text_and_yaml_lists():
    assert reward_entries("accuracy, format ,,rewards.py:score") == ["accuracy", "format", "rewards.py:score"]
    assert reward_entries(["accuracy", " length "]) == ["accuracy", "length"]
    assert reward_entries("") == [] and reward_entries(None) == []
    assert reward_weight_values("1, 0.5,-2") == [1.0, 0.5, -2.0]
    assert reward_weight_values([1, 0.25]) == [1.0, 0.25]
    assert reward_weight_values("") == []
    for bad in ("1,x", "nan", "1,inf", [True]):
        with pytest.raises(ValueError):
            reward_weight_values(bad)
    assert [entry_kind(e) for e in ("exact", "r.py:f", "r.py", "r.txt:f", "runs/rm-1")] == ["builtin", "function", "function",
                                                                                          "function", "rm"]
    assert unique_names(["accuracy", "score", "accuracy", "accuracy"]) == ["accuracy", "score", "accuracy_2", "accuracy_3"]


def test_the_stage_options_take_a_yaml_list_as_comma_text():
    from ftui.stages import StageDescription, CONVERSATIONS
    from ftui.stages.reward_options import REWARD_OPTIONS

    stage = StageDescription(name="rewardlist", short="t", help="t", order=99, data=CONVERSATIONS, options=REWARD_OPTIONS)
    read = stage.options_model().model_validate({"reward_funcs": ["accuracy", "format"], "reward_weights": [1, 0.5]})
    assert read.reward_funcs == "accuracy,format" and read.reward_weights == "1,0.5"


# --- The built-ins

def test_exact_compares_stripped_text_and_leaves_records_without_a_reference_unscored():
    assert exact_reward([" 12\n", "12.0", "x"], ["12", "12", None]) == [1.0, 0.0, None]


@needs_math_verify
def test_accuracy_is_trls_accuracy_reward_through_math_verify():
    completions = ["so \\boxed{12}", "The answer is $12$.", "\\boxed{0.5}", "\\boxed{\\frac{1}{2}}", "\\boxed{13}",
                   "12", "Paris", "no idea"]
    refs = ["12", "12", "1/2", "0.5", "12", "12", "paris", None]
    # a reference that does not parse as maths is compared as text (stripped, lower-cased), as TRL does; a
    # bare number in the completion is not an answer (TRL asks for LaTeX: $...$ or \boxed{})
    assert accuracy_reward(completions, refs) == [1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 1.0, None]


@needs_math_verify
def test_accuracy_off_the_main_thread_runs_without_signal_timeouts():
    import threading

    out = []
    worker = threading.Thread(target=lambda: out.append(accuracy_reward(["\\boxed{\\frac{2}{4}}"], ["0.5"])))
    worker.start()
    worker.join()
    assert out == [[1.0]]


def test_format_matches_the_whole_completion():
    reward = format_reward(DEFAULT_FORMAT_PATTERN)
    assert reward(completions=["<think>a\nb</think>\n<answer>3</answer>", "<think>a</think><answer>3</answer> more",
                               "<answer>3</answer>"]) == [1.0, 0.0, 0.0]
    assert format_reward(r"\d+")(completions=["42", "42!"]) == [1.0, 0.0]


def test_think_format_is_trls():
    assert think_format_reward(["<think>\nhm\n</think>\n42", "<think>a</think><think>b</think>", "42 <think>a</think>",
                                "<think>open"]) == [1.0, 0.0, 0.0, 0.0]


def test_length_is_dapos_soft_overlong_punishment():
    reward = length_reward(max_completion_length=10, cache=4)
    ids = [[0] * n for n in (3, 6, 7, 8, 10, 11)]
    assert reward(completion_ids=ids) == pytest.approx([0.0, 0.0, -0.25, -0.5, -1.0, -1.0])


# --- The run's rewards

def test_load_rewards_builds_the_columns_and_weights(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "rewards.py").write_text(textwrap.dedent('''
        def score(prompts, completions, completion_ids, reference, solution, record, dataset, **kwargs):
            print("a user's function may print")
            assert len(prompts) == len(completions) == len(completion_ids) == len(reference) == len(solution) == len(record)
            assert all(d == "maths" for d in dataset) and solution == [f"s{i}" for i in record]
            return [None if c == "skip" else float(len(ids)) for c, ids in zip(completions, completion_ids)]
    '''))
    cfg = {"reward_funcs": "exact,rewards.py:score,exact,length", "reward_weights": "1,0.5,2,1", "max_completion_length": 4,
           "soft_punish_cache": 2}
    rewards = load_rewards(cfg, tokenizer=None, device="cpu")
    assert rewards.names == ["exact", "score", "exact_2", "length"] and rewards.weights == [1.0, 0.5, 2.0, 1.0]
    out = call(rewards, ["7", "skip", " 9 "], ["7", "8", "9"], ids=[[1], [1, 2, 3], [1, 2, 3, 4, 5]])
    assert out.dtype == torch.float32 and out.shape == (3, 4)
    expected = [[1, 1, 1, 0], [0, math.nan, 0, -0.5], [1, 5, 1, -1]]
    assert torch.allclose(out, torch.tensor(expected), equal_nan=True)
    # reward_weights empty: all 1; the same file twice is imported once
    again = load_rewards({"reward_funcs": ["rewards.py:score", "rewards.py:score"]}, None, "cpu")
    assert again.weights == [1.0, 1.0] and again.names == ["score", "score_2"]


def test_the_default_reward_is_accuracy_and_needs_math_verify(monkeypatch):
    import ftui.runner.rewards as rewards_module

    monkeypatch.setattr(rewards_module, "math_verify_available", lambda: False)
    with pytest.raises(RewardError, match=r"accuracy needs the math-verify package: pip install 'ftui\[rl\]'"):
        load_rewards({}, None, "cpu")
    with pytest.raises(RewardError, match="reward_funcs is empty"):
        load_rewards({"reward_funcs": " , "}, None, "cpu")
    with pytest.raises(RewardError, match="2 number"):
        load_rewards({"reward_funcs": "exact", "reward_weights": "1,2"}, None, "cpu")
    with pytest.raises(RewardError, match="'x' is not a number"):
        load_rewards({"reward_funcs": "exact", "reward_weights": "x"}, None, "cpu")
    with pytest.raises(RewardError, match="reward length needs max_completion_length"):
        load_rewards({"reward_funcs": "length"}, None, "cpu")
    with pytest.raises(RewardError, match="format_pattern is not a regular expression"):
        load_rewards({"reward_funcs": "format", "format_pattern": "(unclosed"}, None, "cpu")


# --- A user's function that fails: each message names the file, the function and the record

USER_FILE = '''
    calls = []

    def raises(completions, record, **kwargs):
        if "boom" in completions:
            raise ValueError("cannot score " + completions[completions.index("boom")])
        return [1.0] * len(completions)

    def batch_fails(completions, **kwargs):
        if len(completions) > 1:
            raise RuntimeError("only one at a time")
        return [1.0]

    def short(completions, **kwargs):
        return [1.0]

    def text(completions, **kwargs):
        return [1.0, "high", 0.0]

    def not_a_list(completions, **kwargs):
        return 3.0

    def nan(completions, **kwargs):
        return [1.0, 2.0, float("nan")]

    def numpy_like(completions, **kwargs):
        import torch
        return torch.tensor([1.0, 2.0, 3.0])

    def no_kwargs(completions):
        return [0.0] * len(completions)
'''


@pytest.fixture
def user_rewards(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine.py").write_text(textwrap.dedent(USER_FILE))
    return lambda name: load_rewards({"reward_funcs": f"mine.py:{name}"}, None, "cpu")


@pytest.mark.parametrize("name, message", [
    ("raises", r"^reward function mine\.py:raises raised ValueError: cannot score boom on dataset maths record 1$"),
    ("batch_fails", r"^reward function mine\.py:batch_fails raised RuntimeError: only one at a time on dataset maths record 0, "
                    r"dataset maths record 1, dataset maths record 2$"),
    ("short", r"^reward function mine\.py:short returned 1 value\(s\) for 3 completion\(s\) \(dataset maths record 0, .*\); "
              r"it must return a list"),
    ("not_a_list", r"^reward function mine\.py:not_a_list returned float for 3 completion"),
    ("text", r"^reward function mine\.py:text returned a str for dataset maths record 1; return a number, or None"),
    ("nan", r"^reward function mine\.py:nan returned nan for dataset maths record 2; return a finite number"),
    ("no_kwargs", r"^reward function mine\.py:no_kwargs raised TypeError: .*unexpected keyword argument 'prompts' on "
                  r"dataset maths record 0$"),
])
def test_a_failing_user_function_is_named_with_its_record(user_rewards, name, message):
    with pytest.raises(RewardError, match=message):
        call(user_rewards(name), ["fine", "boom", "also fine"], ["a", "b", "c"])


def test_a_tensor_of_numbers_is_a_fine_result(user_rewards):
    assert call(user_rewards("numpy_like"), ["a", "b", "c"], ["a", "b", "c"])[:, 0].tolist() == [1.0, 2.0, 3.0]


def test_a_reward_file_or_function_that_is_not_there_is_named(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(RewardError, match=r"reward file gone\.py does not exist \(reward_funcs gone\.py:f; a path relative to "):
        load_rewards({"reward_funcs": "gone.py:f"}, None, "cpu")
    (tmp_path / "here.py").write_text("def f(**kw):\n    return []\nvalue = 3\n")
    with pytest.raises(RewardError, match=r"^reward file here\.py has no function g$"):
        load_rewards({"reward_funcs": "here.py:g"}, None, "cpu")
    with pytest.raises(RewardError, match=r"^reward file here\.py has no function value$"):
        load_rewards({"reward_funcs": "here.py:value"}, None, "cpu")
    (tmp_path / "broken.py").write_text("import nonexistent_module_of_nobody\n")
    with pytest.raises(RewardError, match=r"^reward file broken\.py failed on import: ModuleNotFoundError: No module named"):
        load_rewards({"reward_funcs": "broken.py:f"}, None, "cpu")


# --- A reward model from an rm run

def make_rm_run(root, template="default"):
    """An rm run's directory as ftui writes one: config.yaml and final/ (a full model, its
    tokenizer and value_head.safetensors under TRL's names), with random weights."""
    import yaml
    from safetensors.torch import save_file
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from ftui.rundir.paths import DEMO_MODEL_DIR

    run = root / "rm-run"
    final = run / "final"
    final.mkdir(parents=True)
    (run / "config.yaml").write_text(yaml.safe_dump({"model_name_or_path": "ftui-demo", "stage": "rm", "dataset": "dpo_en_demo",
                                                      "finetuning_type": "full", "template": template}))
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(DEMO_MODEL_DIR))
    model.save_pretrained(final, safe_serialization=True)
    AutoTokenizer.from_pretrained(DEMO_MODEL_DIR).save_pretrained(final)
    hidden = model.config.hidden_size
    head = {"v_head.summary.weight": torch.randn(1, hidden) * 0.5, "v_head.summary.bias": torch.tensor([0.25])}
    save_file(head, str(final / "value_head.safetensors"))
    return run, model.eval(), head


def test_an_rm_runs_reward_model_scores_prompt_and_completion_at_the_last_token(tmp_path):
    from transformers import AutoTokenizer

    run, model, head = make_rm_run(tmp_path)
    rewards = load_rewards({"reward_funcs": f"{run},exact"}, None, "cpu")
    assert rewards.names == ["rm-run", "exact"]
    prompts, completions = ["User: 1+1?\nAssistant:", "Hi"], [" 2", " there, a longer answer than the other"]
    out = rewards(prompts, completions, [[1], [1]], records("2", None))
    tok = AutoTokenizer.from_pretrained(run / "final")
    for i, (p, c) in enumerate(zip(prompts, completions)):  # each text alone: no padding to get wrong
        ids = tok(p + c, return_tensors="pt", add_special_tokens=False)["input_ids"]
        with torch.no_grad():
            last = model(input_ids=ids, output_hidden_states=True).hidden_states[-1][0, -1]
        expected = last @ head["v_head.summary.weight"][0] + head["v_head.summary.bias"][0]
        assert out[i, 0].item() == pytest.approx(expected.item(), abs=1e-4)
    assert out[0, 1].item() == 1.0 and math.isnan(out[1, 1].item())


def test_a_run_ended_by_a_reward_error_says_what_to_fix():
    from ftui.config.load import demo_config
    from ftui.runner.faults import hint_for

    hint = hint_for(RewardError("reward function r.py:f raised KeyError: 'x' on dataset d record 3"), demo_config())
    assert hint == "fix the reward function (reward_funcs) or the dataset it reads, then start the run again"


def test_a_reward_model_loads_in_the_runs_half_precision(tmp_path):
    from ftui.runner.rewards import RewardModelScorer, score_dtype

    run, _model, _head = make_rm_run(tmp_path)
    assert score_dtype({"bf16": True}) == torch.bfloat16 and score_dtype({}) == torch.float32
    scorer = RewardModelScorer(run, "cpu", torch.bfloat16)
    assert next(scorer.model.parameters()).dtype == torch.bfloat16
    assert all(math.isfinite(v) for v in scorer(prompts=["a", "b c"], completions=[" d", " e f g"]))


def test_a_lora_rm_runs_adapter_is_merged_onto_its_saved_base(tmp_path):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoTokenizer

    from ftui.runner.rewards import RewardModelScorer

    run, model, head = make_rm_run(tmp_path)
    final = run / "final"
    model.save_pretrained(run / "base_model", safe_serialization=True)  # a random base, as a model_init: random run keeps it
    AutoTokenizer.from_pretrained(final).save_pretrained(run / "base_model")
    torch.manual_seed(1)
    peft_model = get_peft_model(model, LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
    for name in list(final.iterdir()):
        if name.name != "value_head.safetensors":
            name.unlink()
    peft_model.save_pretrained(final)
    AutoTokenizer.from_pretrained(run / "base_model").save_pretrained(final)
    scorer = RewardModelScorer(run, "cpu")
    ids = AutoTokenizer.from_pretrained(final)("ab cd", return_tensors="pt", add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        last = peft_model(input_ids=ids, output_hidden_states=True).hidden_states[-1][0, -1]
    expected = last @ head["v_head.summary.weight"][0] + head["v_head.summary.bias"][0]
    assert scorer(prompts=["ab"], completions=[" cd"])[0] == pytest.approx(expected.item(), abs=1e-4)
