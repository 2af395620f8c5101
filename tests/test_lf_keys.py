"""Every LLaMA-Factory key is implemented, refused by name, or known to have no effect (issue 14,
item 3): the config side (no torch). What the implemented keys do to training is in
tests/test_lf_methods.py."""

import json
import shutil
import subprocess
import sys

import pytest

from ftui.config.schema import RunConfig
from ftui.config.preflight import validate_config
from ftui.rundir.paths import DEMO_MODEL_DIR
from ftui.presets.lf_keys import LF_DEFAULTS, NO_EFFECT, REFUSED
from ftui.stages import option_keys

DEMO = {"model_name_or_path": "ftui-demo", "model_init": "random", "dataset": "ftui_demo", "cutoff_len": 128}


def problems_of(**over) -> dict[str, str]:
    _cfg, problems = validate_config(DEMO | over)
    return {p.field: p.message for p in problems}


def test_every_llamafactory_key_is_a_field_refused_or_without_effect():
    assert len(LF_DEFAULTS) > 300  # llamafactory_keys.json: 0.9.5's whole argument list
    fields = set(RunConfig.model_fields) | option_keys()  # a stage's own options (ppo's ppo_* and reward_model*)
    unclassified = sorted(k for k in LF_DEFAULTS if k not in fields and k not in REFUSED and k not in NO_EFFECT)
    assert unclassified == []
    assert {"ppo_buffer_size", "ppo_epochs", "ppo_score_norm", "ppo_target", "ppo_whiten_rewards", "reward_model",
            "reward_model_type"} <= option_keys() - NO_EFFECT
    assert not (set(REFUSED) & NO_EFFECT)


@pytest.mark.parametrize("key,value,why", [
    ("ray_num_workers", 4, "Ray"), ("use_galore", True, "training method"), ("adapter_name_or_path", "x", "adapter"),
    ("quantization_method", "gptq", "bitsandbytes"), ("streaming", True, "streaming"),
    ("rope_scaling", "linear", "config.json"), ("push_to_hub", True, "upload"), ("label_smoothing_factor", 0.1, "smoothing"),
])
def test_a_result_changing_key_is_refused_by_name_and_why(key, value, why):
    problems = problems_of(**{key: value})
    assert key in problems and "not supported" in problems[key] and why in problems[key]


@pytest.mark.parametrize("key,value", [("ray_num_workers", 1), ("use_galore", False), ("adapter_name_or_path", None),
                                       ("quantization_method", "bnb"), ("streaming", False), ("push_to_hub", False)])
def test_a_refused_key_at_llamafactorys_default_asks_for_nothing_and_passes(key, value):
    cfg, problems = validate_config(DEMO | {key: value})
    assert problems == [] and cfg is not None


def test_neat_packing_is_ftuis_packing_for_sft_and_refused_by_name_for_other_stages():
    from ftui.config.load import parse_config
    from ftui.tui.screens.launch_fields import config_to_form

    cfg, warnings = parse_config(DEMO | {"neat_packing": True})
    assert (cfg.packing, cfg.neat_packing, warnings) == (True, True, [])
    assert parse_config(DEMO | {"neat_packing": True, "packing": False})[0].packing is True  # as LLaMA-Factory sets it
    assert parse_config(DEMO)[0].packing is None
    assert "stage sft only" in problems_of(neat_packing=True, stage="pt")["neat_packing"]
    assert config_to_form(DEMO | {"neat_packing": True})["packing"] == "on"
    assert config_to_form(DEMO | {"neat_packing": True, "stage": "pt"}).get("packing") != "on"


def test_keys_without_effect_are_one_warning():
    from ftui.config.load import parse_config

    _cfg, warnings = parse_config(DEMO | {"plot_loss": True, "ddp_timeout": 9, "dataloader_num_workers": 4, "use_galore": False})
    assert warnings == ["4 key(s) kept in the file with no effect on what is trained: "
                        "dataloader_num_workers, ddp_timeout, plot_loss, use_galore"]


def test_a_key_nobody_knows_is_refused_with_the_closest_name():
    """As LLaMA-Factory's parser refuses it: a misspelt learning_rate was meant to change the
    result, and training at the default instead would be a silent surprise."""
    problems = problems_of(learnig_rate=1e-4, num_train_epoch=3, micro_batch_size=4, plot_loss=True)
    assert set(problems) == {"learnig_rate", "num_train_epoch", "micro_batch_size"}
    assert "did you mean learning_rate?" in problems["learnig_rate"]
    assert "did you mean num_train_epochs?" in problems["num_train_epoch"]
    assert "unknown key" in problems["micro_batch_size"] and "did you mean" not in problems["micro_batch_size"]


def test_a_misspelt_set_stops_ftui_train_before_anything_is_made(tmp_path, capsys):
    from ftui.cli import main as cli

    code = cli.main(["train", "--root", str(tmp_path / "runs"), "--preset", "demo", "--set", "lerning_rate=1e-3"])
    err = " ".join(capsys.readouterr().err.split())
    assert code == 2 and "lerning_rate" in err and "did you mean learning_rate?" in err
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_every_llamafactory_stage_is_one_ftui_trains():
    problems = problems_of(stage="ppo")
    assert "stage" not in problems and "needs a reward model" in problems["reward_model"]  # ppo is a stage now
    for stage in ("dpo", "kto", "rm"):
        assert "stage" not in problems_of(stage=stage)
    assert "'grpo' or 'ppo'" in problems_of(stage="sdpo")["stage"]


def test_lora_variants_need_lora_as_in_llamafactory():
    for key, value in (("use_dora", True), ("use_rslora", True), ("pissa_init", True), ("loraplus_lr_ratio", 16.0),
                       ("additional_target", "lm_head")):
        assert "only valid with finetuning_type lora" in problems_of(finetuning_type="full", **{key: value})[key]
        assert key not in problems_of(finetuning_type="lora", **{key: value})


def test_optim_names_the_ones_ftui_builds_and_refuses_8bit_without_bitsandbytes_and_cuda():
    assert problems_of(optim="adamw_torch") == {} and problems_of(optim="adamw_torch_fused") == {}
    assert "adamw_torch, adamw_torch_fused" in problems_of(optim="sgd")["optim"]
    message = problems_of(optim="paged_adamw_8bit", device="cpu")["optim"]
    assert "not possible here" in message and "CUDA" in message and "adamw_torch" in message


def test_lora_target_and_additional_target_take_llamafactorys_forms():
    assert RunConfig.model_validate(DEMO | {"lora_target": ["q_proj", "v_proj"]}).lora_target == "q_proj,v_proj"
    assert problems_of(lora_target="q_proj, v_proj") == {} and problems_of(lora_target="all") == {}
    assert "lora_target" in problems_of(lora_target="q_proj;rm -rf")
    assert "additional_target" in problems_of(additional_target="embed tokens")


def test_mixing_rules_as_llamafactory():
    two = {"dataset": "ftui_demo,ftui_demo"}
    assert "only valid with mix_strategy interleave" in problems_of(**two, interleave_probs="0.5,0.5")["interleave_probs"]
    assert "one per dataset" in problems_of(**two, mix_strategy="interleave_under", interleave_probs="1.0")["interleave_probs"]
    assert "add up to 1" in problems_of(**two, mix_strategy="interleave_over", interleave_probs="0.5,0.9")["interleave_probs"]
    assert problems_of(**two, mix_strategy="interleave_over", interleave_probs="0.25,0.75") == {}
    assert "mix_strategy" in problems_of(mix_strategy="shuffle")


def test_eval_dataset_or_val_size_not_both():
    assert "either eval_dataset or val_size" in problems_of(eval_dataset="ftui_demo", val_size=0.1)["val_size"]
    assert problems_of(eval_dataset="ftui_demo") == {}


def test_tokenized_path_must_be_new_or_written_by_a_run(tmp_path):
    (tmp_path / "notes.txt").write_text("x")
    assert "this is a file" in problems_of(tokenized_path=str(tmp_path / "notes.txt"))["tokenized_path"]
    assert "no encoded data" in problems_of(tokenized_path=str(tmp_path))["tokenized_path"]
    assert problems_of(tokenized_path=str(tmp_path / "new")) == {}
    (tmp_path / "saved").mkdir()
    (tmp_path / "saved" / "dataset_dict.json").write_text('{"splits": ["train"]}')
    assert problems_of(tokenized_path=str(tmp_path / "saved")) == {}


def test_resume_from_checkpoint_must_be_an_ftui_run_or_checkpoint(tmp_path):
    hf = tmp_path / "saves" / "checkpoint-500"
    hf.mkdir(parents=True)
    (hf / "trainer_state.json").write_text("{}")
    assert "not an ftui run or checkpoint" in problems_of(resume_from_checkpoint=str(hf))["resume_from_checkpoint"]
    assert "does not exist" in problems_of(resume_from_checkpoint=str(tmp_path / "nope"))["resume_from_checkpoint"]
    assert problems_of(resume_from_checkpoint=None) == {}


def test_media_datasets_are_judged_by_the_registry_before_a_run(lf_data, tmp_path):
    """Images, videos and audios pass the registry for stage sft (the model and the records are
    checked in preflight: tests/test_vl_data.py, test_video_data.py, test_audio_checks.py);
    videos and audios with another stage, and images for stages pt, kto and rm (which
    LLaMA-Factory 0.9.5 does not train on images), are refused by name."""
    from ftui.data.registry import dataset_path_problem

    for name in ("mllm_demo", "mllm_video_demo", "mllm_audio_demo"):
        assert dataset_path_problem(f"identity,{name}", str(lf_data), "sft") is None
    assert "stage dpo with videos is not supported yet" in dataset_path_problem("mllm_video_demo", str(lf_data), "dpo")
    assert "stage kto with images is not supported yet" in dataset_path_problem("mllm_demo", str(lf_data), "kto")
    assert dataset_path_problem("identity,alpaca_en_demo", str(lf_data)) is None


def test_a_multimodal_or_pre_quantized_model_is_refused(tmp_path):
    for name, extra, said in (("vl", {"vision_config": {"depth": 2}}, "multimodal model"),
                              ("awq", {"quantization_config": {"quant_method": "awq"}}, "quantized with awq")):
        folder = tmp_path / name
        shutil.copytree(DEMO_MODEL_DIR, folder)
        config = json.loads((folder / "config.json").read_text()) | extra
        (folder / "config.json").write_text(json.dumps(config))
        assert said in problems_of(model_name_or_path=str(folder))["model_name_or_path"]


def test_ftui_train_and_plan_exit_2_naming_a_refused_key(tmp_path):
    for command in ("train", "plan"):
        proc = subprocess.run([sys.executable, "-m", "ftui.cli.main", command, "--preset", "demo", "--set", "ray_num_workers=4",
                               "--set", "use_badam=true"], capture_output=True, text=True, cwd=tmp_path, timeout=120)
        said = " ".join(proc.stderr.split())
        assert proc.returncode == 2 and "ray_num_workers = 4: not supported" in said and "use_badam = True" in said, said


async def test_the_form_shows_a_refused_key_and_keeps_fields_it_has_no_widget_for(tmp_path):
    from textual.widgets import Button

    from tests.test_tui_pilot import make_app, until

    config = tmp_path / "c.yaml"
    config.write_text("model_name_or_path: ftui-demo\nmodel_init: random\ndataset: ftui_demo\ncutoff_len: 128\n"
                      "ray_num_workers: 4\nuse_dora: true\n")
    app = make_app(tmp_path)
    async with app.run_test(size=(120, 45)) as pilot:
        screen = app.screen
        await until(pilot, lambda: screen._ready)
        screen.load_yaml(str(config))
        await until(pilot, lambda: any(p.field == "ray_num_workers" for p in screen.problems))
        assert screen.query_one("#start", Button).disabled
        assert screen.current_config_dict()["use_dora"] is True  # a RunConfig field the form has no widget for


def test_resume_from_checkpoint_becomes_ftui_resume_of_that_run_with_the_yamls_keys(tmp_path):
    """`ftui train CONFIG` with resume_from_checkpoint: RUN/checkpoints/step-N is `ftui train
    --resume RUN --checkpoint step-N`, the YAML's keys that differ from the run's as --set."""
    import argparse

    from ftui.cli.parser import build_parser
    from ftui.cli.train import _as_resume_args
    from ftui.config.load import demo_config

    run = tmp_path / "runs" / "demo-1"
    (run / "checkpoints" / "step-2").mkdir(parents=True)
    (run / "checkpoints" / "step-2" / "trainer_state.json").write_text("{}")
    demo_config(max_steps=4).save(run / "config.yaml", include_unsupported=False)
    yaml_cfg = demo_config(max_steps=10, learning_rate=1e-3, resume_from_checkpoint=str(run / "checkpoints" / "step-2"))
    args = build_parser().parse_args(["train", "c.yaml", "--detach"])
    resume = _as_resume_args(args, yaml_cfg)
    assert isinstance(resume, argparse.Namespace) and resume.config is None and resume.detach
    assert resume.resume == str(run.resolve()) and resume.checkpoint == str((run / "checkpoints" / "step-2").resolve())
    assert sorted(resume.overrides) == ["learning_rate=0.001", "max_steps=10"]
    assert _as_resume_args(args, yaml_cfg.model_copy(update={"resume_from_checkpoint": str(run)})).checkpoint is None


async def test_a_yaml_with_neat_packing_shows_packing_on_in_the_form_and_saves_it_so(tmp_path):
    from tests.test_tui_pilot import make_app, until

    config = tmp_path / "c.yaml"
    config.write_text("model_name_or_path: ftui-demo\nmodel_init: random\ndataset: ftui_demo\ncutoff_len: 128\nneat_packing: true\n")
    app = make_app(tmp_path)
    async with app.run_test(size=(120, 45)) as pilot:
        screen = app.screen
        await until(pilot, lambda: screen._ready)
        screen.load_yaml(str(config))
        await until(pilot, lambda: screen.values().get("packing") == "on")
        saved = screen.current_config_dict()
        assert saved["packing"] is True and "neat_packing" not in saved


def test_a_multimodal_template_of_llamafactory_is_refused_as_multimodal_not_as_unknown():
    for name in ("llava_next", "pixtral", "qwen2_omni"):
        message = problems_of(template=name)["template"]
        assert "vision, video or audio) model family ftui does not train yet" in message and "allowed:" not in message
    for name in ("qwen2_vl", "qwen3_vl_nothink", "llava", "intern_vl"):  # a family ftui trains: refused for the demo's text-only Llama alone
        message = problems_of(template=name)["template"]
        assert "encodes images for Qwen2-VL" in message and "model_type llama) reads text only" in message
    assert "allowed:" in problems_of(template="qwen99")["template"]
    assert "template" not in problems_of(template="gemma3")  # a text template in ftui, multimodal in LLaMA-Factory
