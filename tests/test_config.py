"""RunConfig: LLaMA-Factory YAML compatibility, per-field messages, round trips."""

import subprocess
import sys

import pytest
import yaml

from ftui.config.problems import ConfigError
from ftui.config.schema import RunConfig
from ftui.config.load import load_config, parse_config
from ftui.config.preflight import validate_config

LF_LORA_SFT = """\
### model
model_name_or_path: meta-llama/Meta-Llama-3-8B-Instruct
trust_remote_code: true

### method
stage: sft
do_train: true
finetuning_type: lora
lora_rank: 8
lora_target: all

### dataset
dataset: identity,alpaca_en_demo
template: llama3
cutoff_len: 2048
max_samples: 1000
overwrite_cache: true
preprocessing_num_workers: 16
dataloader_num_workers: 4

### output
output_dir: saves/llama3-8b/lora/sft
logging_steps: 10
save_steps: 500
plot_loss: true
overwrite_output_dir: true
save_only_model: false
report_to: none

### train
per_device_train_batch_size: 1
gradient_accumulation_steps: 8
learning_rate: 1.0e-4
num_train_epochs: 3.0
lr_scheduler_type: cosine
warmup_ratio: 0.1
bf16: true
ddp_timeout: 180000000
resume_from_checkpoint: null
"""


def test_llamafactory_sft_yaml_loads_and_lists_unsupported_keys_once(tmp_path):
    path = tmp_path / "llama3_lora_sft.yaml"
    path.write_text(LF_LORA_SFT)
    cfg, warnings = load_config(path)
    assert cfg.finetuning_type == "lora" and cfg.lora_rank == 8 and cfg.learning_rate == 1e-4
    assert cfg.precision == "bf16" and cfg.template == "llama3" and cfg.max_samples == 1000
    assert cfg.dataset == "identity,alpaca_en_demo" and cfg.gradient_accumulation_steps == 8
    assert len(warnings) == 1
    for key in ("overwrite_cache", "preprocessing_num_workers", "dataloader_num_workers", "plot_loss",
                "overwrite_output_dir", "save_only_model", "ddp_timeout"):
        assert key in warnings[0]
    assert "learning_rate" not in warnings[0] and "resume_from_checkpoint" not in warnings[0]  # a field now (null: a fresh run)
    assert "report_to" not in warnings[0]  # supported: none, tensorboard, wandb
    assert cfg.report_to == "none"


def test_unsupported_keys_survive_a_save_and_are_not_in_the_run_config(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(LF_LORA_SFT)
    cfg, _ = load_config(path)
    cfg.save(tmp_path / "saved.yaml")
    assert yaml.safe_load((tmp_path / "saved.yaml").read_text())["plot_loss"] is True
    cfg.save(tmp_path / "run.yaml", include_unsupported=False)
    again, warnings = load_config(tmp_path / "run.yaml")
    assert warnings == [] and again.model_dump() == RunConfig.model_validate(cfg.to_dict(False)).model_dump()


def test_bad_values_give_one_message_per_field_with_value_and_what_is_allowed():
    data = yaml.safe_load(LF_LORA_SFT) | {"learning_rate": "fast", "finetuning_type": "qlora", "lora_rank": 0, "lr_scheduler_type": "zigzag"}
    with pytest.raises(ConfigError) as info:
        parse_config(data)
    problems = {p.field: p for p in info.value.problems}
    assert set(problems) == {"learning_rate", "finetuning_type", "lora_rank", "lr_scheduler_type"}
    assert problems["learning_rate"].value == "fast" and "number" in problems["learning_rate"].message
    assert "'full', 'lora' or 'freeze'" in problems["finetuning_type"].message
    assert "quantization_bit" in problems["finetuning_type"].message  # says how QLoRA is spelled
    assert "greater than or equal to 1" in problems["lora_rank"].message
    assert "cosine" in problems["lr_scheduler_type"].message
    assert "lr_scheduler_type = 'zigzag'" in str(info.value)


def test_a_number_field_refuses_nan_inf_and_true_instead_of_reading_them_oddly():
    """learning_rate: .nan passed "<= 10" as nonsense, max_steps: true trained one step."""
    data = yaml.safe_load(LF_LORA_SFT) | {"learning_rate": float("nan"), "num_train_epochs": float("inf"), "max_steps": True,
                                          "lora_alpha": False, "gradient_checkpointing": True}
    with pytest.raises(ConfigError) as info:
        parse_config(data)
    problems = {p.field: p.message for p in info.value.problems}
    assert set(problems) == {"learning_rate", "num_train_epochs", "max_steps", "lora_alpha"}  # a bool field keeps its bool
    assert "finite number" in problems["learning_rate"] and "finite number" in problems["num_train_epochs"]
    assert "not true or false" in problems["max_steps"] and "not true or false" in problems["lora_alpha"]


def test_required_fields_say_so_in_words_and_other_problems_show_at_the_same_time():
    from ftui.config.preflight import validate_config

    cfg, problems = validate_config({"model_name_or_path": "./no/such/model", "dataset": "", "bf16": True, "fp16": True})
    by_field = {p.field: p.message for p in problems}
    assert cfg is None and by_field["dataset"] == "required: a dataset name or file"
    assert "no such model directory" in by_field["model_name_or_path"] and "choose one precision" in by_field["fp16"]
    # an empty config: the two required fields, nothing checked against the stand-in model (cutoff_len 2048 > the demo's 512)
    assert {p.field for p in validate_config({})[1]} == {"model_name_or_path", "dataset"}
    cfg, problems = validate_config({"learning_rate": "fast"})
    by_field = {p.field: p.message for p in problems}
    assert by_field["model_name_or_path"] == "required: a model directory or hub name"
    assert by_field["dataset"] == "required: a dataset name or file" and "number" in by_field["learning_rate"]


def test_cross_field_rules_name_the_field():
    base = {"model_name_or_path": "org/model", "dataset": "x"}
    cases = {
        "fp16": {"bf16": True, "fp16": True},
        "quantization_bit": {"quantization_bit": 4, "finetuning_type": "full"},
        "nproc_per_node": {"engine": "single", "nproc_per_node": 2},
        "rdzv_endpoint": {"engine": "ddp", "nnodes": 2},
        "template": {"template": "klingon"},
        "model_name_or_path": {"model_name_or_path": "./no/such/model"},
        "run_name": {"run_name": "../escape"},
        "torch_compile": {"torch_compile": True, "engine": "zero2", "nproc_per_node": 2},
    }
    for field, over in cases.items():
        with pytest.raises(ConfigError) as info:
            parse_config(base | over)
        assert [p.field for p in info.value.problems] == [field], over


def test_qlora_is_refused_at_validation_without_cuda_and_bitsandbytes():
    with pytest.raises(ConfigError) as info:
        parse_config({"model_name_or_path": "org/m", "dataset": "x", "finetuning_type": "lora", "quantization_bit": 4})
    (problem,) = info.value.problems
    assert problem.field == "quantization_bit" and "QLoRA is not possible here" in problem.message
    assert "without quantization_bit" in problem.message


def test_liger_kernels_are_refused_on_cpu_and_when_not_installed():
    base = {"model_name_or_path": "org/m", "dataset": "x", "enable_liger_kernel": True}
    with pytest.raises(ConfigError) as info:
        parse_config(base | {"device": "cpu"})
    assert [p.field for p in info.value.problems] == ["enable_liger_kernel"] and "CPU" in info.value.problems[0].message
    with pytest.raises(ConfigError) as info:  # liger-kernel is not installed here
        parse_config(base)
    assert "pip install liger-kernel" in info.value.problems[0].message
    assert parse_config({"model_name_or_path": "org/m", "dataset": "x", "torch_compile": True})[0].torch_compile


def test_missing_and_unreadable_files(tmp_path):
    with pytest.raises(ConfigError, match="no such file"):
        load_config(tmp_path / "absent.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("model_name_or_path: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)
    notmap = tmp_path / "list.yaml"
    notmap.write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_config(notmap)


def test_yaml_tags_are_not_executed(tmp_path):
    evil = tmp_path / "evil.yaml"
    evil.write_text("model_name_or_path: !!python/object/apply:os.system ['touch pwned']\ndataset: x\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(evil)


def test_cli_train_with_bad_config_exits_2_with_messages(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("model_name_or_path: org/m\ndataset: x\nlearning_rate: -1\nbf16: true\nfp16: maybe\n")
    proc = subprocess.run([sys.executable, "-m", "ftui.cli.main", "train", str(path)], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 2
    assert "learning_rate = -1" in proc.stderr and "fp16 = 'maybe'" in proc.stderr
    assert not (tmp_path / "runs").exists()  # nothing was started


def test_a_runs_root_that_is_a_file_is_a_problem_of_output_dir_not_a_bare_errno(tmp_path):
    (tmp_path / "afile").write_text("")
    base = yaml.safe_load(LF_LORA_SFT)
    for out in ("afile", "afile/deeper/runs"):
        _cfg, problems = validate_config(base | {"output_dir": str(tmp_path / out)})
        assert [(p.field, "is a file, not a directory" in p.message) for p in problems] == [("output_dir", True)]
    assert validate_config(base | {"output_dir": str(tmp_path / "new" / "runs")})[1] == []  # made when missing


def test_a_config_file_that_cannot_be_read_is_one_line_naming_it(tmp_path):
    """Not '<file> has 1 invalid setting(s): - config = <file>: ...' for a file that is not there."""
    for path, says in ((tmp_path / "nosuch.yaml", "no such file"), (tmp_path, "a directory, not a YAML file")):
        with pytest.raises(ConfigError) as info:
            load_config(path)
        assert str(info.value) == f"{path}: {says}"


def test_a_validators_own_words_come_without_pydantics_value_error_prefix(monkeypatch):
    # every LLaMA-Factory stage is trained now: a stand-in refused one says it in its own words
    from ftui.presets import lf_keys

    monkeypatch.setitem(lf_keys.STAGE_REFUSED, "sppo", "SPPO (stage: sppo) is not supported")
    _cfg, problems = validate_config(yaml.safe_load(LF_LORA_SFT) | {"stage": "sppo"})
    (stage,) = [p for p in problems if p.field == "stage"]
    assert stage.message.startswith("SPPO (stage: sppo) is not supported; ftui trains sft, pt")
