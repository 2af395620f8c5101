"""Bad input: any config from YAML or from the form either validates or gives per-field
messages (never a traceback); odd datasets give a DataFormatError that says what is wrong
(or train, cut to cutoff_len)."""

import json

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import tiny_config
from ftui.config.problems import ConfigError, FieldProblem
from ftui.config.schema import RunConfig
from ftui.config.load import parse_config
from ftui.config.preflight import validate_config
from ftui.runner.data import DataFormatError
from ftui.runner.stages import build_datasets

KEYS = sorted(RunConfig.model_fields)
scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**12, 10**12), st.floats(allow_nan=True, allow_infinity=True),
                    st.text(max_size=40), st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=5), st.integers(), max_size=2))
configs = st.dictionaries(st.one_of(st.sampled_from(KEYS), st.text(max_size=12)), scalars, max_size=12)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(configs)
def test_any_mapping_validates_or_gives_per_field_messages(data):
    cfg, problems = validate_config(data)
    assert (cfg is None) == bool(problems)
    for p in problems:
        assert isinstance(p, FieldProblem) and p.field and p.message
        assert str(p)  # printable, names the field


@settings(max_examples=80, deadline=None)
@given(st.text(max_size=300))
def test_any_yaml_text_loads_or_raises_config_error(tmp_path_factory, text):
    path = tmp_path_factory.mktemp("y") / "c.yaml"
    path.write_text(text, encoding="utf-8")
    from ftui.config.load import load_config

    try:
        load_config(path)
    except ConfigError as err:
        assert err.problems and str(err)


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.sampled_from(["cutoff_len", "learning_rate", "per_device_train_batch_size", "nproc_per_node",
                                         "max_steps", "warmup_ratio", "lora_rank", "engine", "method", "precision"]),
                       st.text(max_size=12), max_size=6))
def test_any_form_values_validate_or_give_messages(values):
    """What the launch form sends: every field as typed text."""
    from ftui.tui.screens.launch_fields import FORM_DEFAULTS, config_to_form, form_to_config

    form = config_to_form(dict(FORM_DEFAULTS, model_name_or_path="org/m", dataset="x"))
    form.update(values)
    try:
        data = form_to_config(form)
    except ValueError:
        return  # the form shows conversion errors next to the field
    cfg, problems = validate_config(data)
    assert (cfg is None) == bool(problems)


def test_impossible_combinations_are_refused_with_an_alternative():
    base = {"model_name_or_path": "org/m", "dataset": "x"}
    cases = [
        (dict(finetuning_type="lora", quantization_bit=4), "quantization_bit", "without quantization_bit"),
        (dict(engine="fsdp", nproc_per_node=1), "engine", "use single"),
        (dict(engine="zero3", nproc_per_node=1), "engine", "zero3_offload"),
        (dict(finetuning_type="lora", quantization_bit=4, model_init="random", device="cuda"), "model_init", "use lora"),
        (dict(enable_liger_kernel=True, device="cpu"), "enable_liger_kernel", "turn it off"),
        (dict(fp16=True, device="cpu"), "fp16", "use bf16"),
    ]
    for over, field, alternative in cases:
        with pytest.raises(ConfigError) as info:
            parse_config(base | over)
        msgs = {p.field: p.message for p in info.value.problems}
        assert field in msgs and alternative in msgs[field], (over, msgs)


@pytest.mark.parametrize("case", ["missing_columns", "mixed_formats", "not_a_list", "nulls", "huge_record"])
def test_fuzzed_datasets_say_what_is_wrong(tmp_path, demo_tokenizer, case):
    f = tmp_path / f"{case}.json"
    if case == "missing_columns":
        f.write_text(json.dumps([{"instruction": "q"}]))
        expected = "output"
    elif case == "mixed_formats":
        f.write_text(json.dumps([{"instruction": "q", "output": "a"}, {"conversations": [{"from": "human", "value": "q"}]}]))
        expected = "record 1"
    elif case == "not_a_list":
        f.write_text(json.dumps({"instruction": "q", "output": "a"}))
        expected = ""
    elif case == "nulls":
        f.write_text(json.dumps([{"instruction": None, "output": None}]))
        expected = ""
    else:  # a 2 MB single record: read, cut to cutoff_len, trained on (or dropped with a warning)
        f.write_text(json.dumps([{"instruction": "q " * 1_000_000, "output": "a"}, {"instruction": "q", "output": "a"}]))
        data = build_datasets(tiny_config(tmp_path, dataset=str(f), cutoff_len=64), demo_tokenizer)
        assert all(len(e.input_ids) <= 64 for e in data.train)
        assert data.warnings
        return
    try:
        data = build_datasets(tiny_config(tmp_path, dataset=str(f)), demo_tokenizer)
    except DataFormatError as err:
        assert str(err) and expected in str(err), str(err)
    else:
        assert case == "not_a_list" and len(data.train) == 1, "accepted silently"  # one object is one record


def test_cli_bad_yaml_is_a_message_and_exit_2(tmp_path):
    import subprocess
    import sys

    for text in ("{{{", "- a\n- b\n", "!!python/object/apply:os.system ['echo pwned']", "learning_rate: [1, 2]\nmodel_name_or_path: m\ndataset: x\n"):
        f = tmp_path / "c.yaml"
        f.write_text(text)
        proc = subprocess.run([sys.executable, "-m", "ftui.cli.main", "train", str(f)], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr and "error" in proc.stderr, (text, proc.stderr)
        assert "pwned" not in proc.stdout
    assert yaml  # safe_load is what rejected the python tag above
