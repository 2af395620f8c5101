"""`stage: ppo`'s config: LLaMA-Factory's PPO and generating keys with its defaults, accepted
and kept in the run's config.yaml; the reward model an rm run's directory trained the way
reward_model_type says; what LF's PPO refuses or ftui does not do, refused by name."""

from __future__ import annotations

import yaml

from ftui.config.preflight import validate_config
from ftui.stages import describe
from test_rewards import make_rm_run


def problems(tmp_path, **keys):
    rm_run = tmp_path / "rm-run"
    if not rm_run.exists():
        make_rm_run(tmp_path)
    base = dict(model_name_or_path="m", dataset="d", stage="ppo", reward_model=str(rm_run), reward_model_type="full")
    _cfg, found = validate_config(base | keys)
    return {p.field: p.message for p in found}


def test_the_options_are_llamafactorys_with_its_defaults():
    o = describe("ppo").read_options({})
    assert (o.ppo_buffer_size, o.ppo_epochs, o.ppo_score_norm, o.ppo_target, o.ppo_whiten_rewards, o.reward_model_type) == (
        1, 4, False, 6.0, False, "lora")
    assert (o.max_new_tokens, o.temperature, o.top_p, o.top_k, o.repetition_penalty, o.do_sample) == (1024, 0.95, 0.7, 50, 1.0, True)
    d = describe("ppo")
    assert d.value_head and d.needs_reference({}) and d.planner.generation and d.plotted_first == ("reward", "value_loss")


def test_a_ppo_config_with_llamafactorys_keys_is_accepted_and_kept(tmp_path):
    keys = dict(ppo_buffer_size=2, ppo_epochs=2, ppo_score_norm=True, ppo_target=3.0, ppo_whiten_rewards=True,
                max_new_tokens=64, temperature=0.7, top_p=0.9, top_k=0, repetition_penalty=1.1, do_sample=True)
    assert problems(tmp_path, **keys) == {}
    cfg, _found = validate_config(dict(model_name_or_path="m", dataset="d", stage="ppo", reward_model=str(tmp_path / "rm-run"),
                                       reward_model_type="full", **keys))
    saved = yaml.safe_load(cfg.to_yaml(include_unsupported=False))
    assert all(saved[k] == v for k, v in keys.items()) and saved["reward_model"] == str(tmp_path / "rm-run")


def test_the_reward_model_must_be_an_rm_run_trained_as_reward_model_type_says(tmp_path):
    assert "needs a reward model" in problems(tmp_path, reward_model="")["reward_model"]
    assert "is not a directory" in problems(tmp_path, reward_model=str(tmp_path / "nowhere"))["reward_model"]
    sft = tmp_path / "sft-run"
    sft.mkdir()
    (sft / "config.yaml").write_text("stage: sft\nmodel_name_or_path: m\n")
    assert "not an rm run" in problems(tmp_path, reward_model=str(sft))["reward_model"]
    wrong = problems(tmp_path, finetuning_type="lora", reward_model_type="lora")  # the rm run trained full
    assert "set reward_model_type full" in wrong["reward_model_type"]
    assert "needs finetuning_type lora" in problems(tmp_path, finetuning_type="full", reward_model_type="lora")["reward_model_type"]


def test_what_ppo_does_not_do_is_refused_by_name(tmp_path):
    assert "reward server" in problems(tmp_path, reward_model_type="api")["reward_model_type"]
    assert "beam search" in problems(tmp_path, num_beams=4)["num_beams"]
    assert "does not evaluate" in problems(tmp_path, val_size=0.1)["val_size"]
    assert "tokenized_path" in problems(tmp_path, tokenized_path="/tmp/x")
    assert "not supported" in problems(tmp_path, reward_model_adapters="a")["reward_model_adapters"]
    assert "packing" in problems(tmp_path, packing=True)
    assert "ppo_epochs" in problems(tmp_path, ppo_epochs=0)
    assert "reward_model_type" in problems(tmp_path, reward_model_type="oft")


def test_the_launch_form_gives_a_shared_option_the_chosen_stages_default():
    from ftui.tui.screens.launch_fields import FORM_DEFAULTS, stage_default_updates

    form = dict(FORM_DEFAULTS)
    assert stage_default_updates(form | {"temperature": "0.95", "top_p": "0.7", "top_k": "50"}, "grpo") == {
        "temperature": 1.0, "top_p": 1.0, "top_k": 0}  # TRL's, not LLaMA-Factory's PPO defaults
    assert stage_default_updates(form | {"temperature": "1.0", "top_p": "1.0", "top_k": "0"}, "ppo") == {
        "temperature": 0.95, "top_p": 0.7, "top_k": 50}
    assert stage_default_updates(form | {"temperature": "0.6", "top_p": "0.7", "top_k": "50"}, "grpo") == {
        "top_p": 1.0, "top_k": 0}  # a value the user typed stays
    assert stage_default_updates(form, "sft") == {}


# LLaMA-Factory 0.9.5's examples/train_lora/llama3_lora_ppo.yaml (the shared demo data does not carry LF's examples)
LF_PPO_EXAMPLE = """
### model
model_name_or_path: meta-llama/Meta-Llama-3-8B-Instruct
reward_model: saves/llama3-8b/lora/reward
trust_remote_code: true

### method
stage: ppo
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
output_dir: saves/llama3-8b/lora/ppo
logging_steps: 10
save_steps: 500
plot_loss: true
overwrite_output_dir: true
report_to: none

### train
per_device_train_batch_size: 1
gradient_accumulation_steps: 8
learning_rate: 1.0e-5
num_train_epochs: 3.0
lr_scheduler_type: cosine
warmup_ratio: 0.1
bf16: true
ddp_timeout: 180000000

### generate
max_new_tokens: 512
top_k: 0
top_p: 0.9
"""


def test_llamafactorys_example_ppo_yaml_is_accepted_with_a_tiny_model_and_rm_run(tmp_path):
    run, _model, _head = make_rm_run(tmp_path, template="llama3")
    rm_config = yaml.safe_load((run / "config.yaml").read_text()) | {"finetuning_type": "lora"}
    (run / "config.yaml").write_text(yaml.safe_dump(rm_config))
    data = yaml.safe_load(LF_PPO_EXAMPLE) | {"model_name_or_path": "ftui-demo", "model_init": "random",
                                             "reward_model": str(run), "output_dir": str(tmp_path / "runs")}
    cfg, found = validate_config(data)
    assert [p for p in found] == [] and cfg is not None
    o = describe("ppo").read_options(cfg)
    assert (o.reward_model_type, o.max_new_tokens, o.top_k, o.top_p, o.temperature, o.ppo_epochs) == ("lora", 512, 0, 0.9, 0.95, 4)
