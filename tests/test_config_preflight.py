"""One preflight for the launch form and ``ftui train`` (issue 40, item 4): one table of configs,
each given the same verdict by the form's check (called exactly as its validation worker calls
it, and through the form itself for the rows a user meets most) and by ``ftui train`` (its
exit code 2 and message, before any run directory exists; "ready" rows reach the run's start).

Packages are made absent the way a machine without them shows it: importlib.util.find_spec
finds nothing. No GPU is faked: this machine has none.
"""

import importlib.util
import json
import shutil

import pytest
import yaml
from textual.widgets import Button, Label

from ftui.cli.main import main
from ftui.config.load import demo_data
from ftui.config.preflight import preflight
from ftui.machine.facts import MachineFacts
from ftui.rundir.paths import DEMO_MODEL_DIR
from tests.test_tui_pilot import make_app, until

GOOD = [{"instruction": f"say {i}", "input": "", "output": f"{i}"} for i in range(4)]


class Started(Exception):
    """ftui train got past its checks: it was about to make the run directory."""


@pytest.fixture
def files(tmp_path) -> dict[str, str]:
    good = tmp_path / "good.jsonl"
    good.write_text("".join(json.dumps(r) + "\n" for r in GOOD))
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(GOOD[0]) + "\n" + '{"instruction": "say 1", "output": \n' + json.dumps(GOOD[2]) + "\n")
    wrong = tmp_path / "wrong.jsonl"  # the second record has no answer
    wrong.write_text(json.dumps(GOOD[0]) + "\n" + json.dumps({"instruction": "say 1"}) + "\n")
    learned = tmp_path / "gpt2-style"  # a table of 512 learned positions, no rotary key
    shutil.copytree(DEMO_MODEL_DIR, learned)
    config = json.loads((learned / "config.json").read_text())
    config = {k: v for k, v in config.items() if k not in ("max_position_embeddings", "rope_theta")}
    (learned / "config.json").write_text(json.dumps(config | {"model_type": "gpt2", "n_positions": 512}))
    return {"good": str(good), "bad": str(bad), "wrong": str(wrong), "learned": str(learned)}


# name, overrides of the demo (values naming a file: a key of ``files``), packages absent, verdict:
# None = ready (ftui train starts), else (field, what the message says)
TABLE = [
    ("demo as it is", {}, (), None),
    ("a dataset file", {"dataset": "@good"}, (), None),
    ("missing dataset", {"dataset": "/nowhere/nope.json"}, (), ("dataset", "nope.json")),
    ("a bad JSON line", {"dataset": "@bad"}, (), ("dataset", "line 2 is not JSON")),
    ("a record without its answer", {"dataset": "@wrong"}, (), ("dataset", "record 1")),
    ("an unknown LoRA target", {"finetuning_type": "lora", "lora_target": "foo_proj"}, (), ("lora_target", "q_proj, k_proj")),
    ("LoRA targets the model has", {"finetuning_type": "lora", "lora_target": "q_proj,v_proj"}, (), None),
    ("DeepSpeed absent", {"engine": "zero2", "nproc_per_node": 2}, ("deepspeed",), ("engine", "pip install 'ftui[deepspeed]'")),
    ("tensorboard absent", {"report_to": "tensorboard"}, ("tensorboard",), ("report_to", "pip install tensorboard")),
    ("liger-kernel absent", {"enable_liger_kernel": True, "device": "auto"}, ("liger_kernel",), ("enable_liger_kernel", "pip install liger-kernel")),
    ("cutoff past a RoPE model's positions", {"cutoff_len": 1024}, (), None),
    ("cutoff past learned positions", {"model_name_or_path": "@learned", "cutoff_len": 1024, "template": "default"}, (),
     ("cutoff_len", "learned positions")),
    ("fp16 without a GPU", {"fp16": True, "device": "auto"}, (), ("fp16", "needs a CUDA GPU")),
    ("device cuda without a GPU", {"device": "cuda"}, (), ("device", "no CUDA GPU")),
]


def config_data(tmp_path, files, overrides) -> dict:
    data = demo_data(output_dir=str(tmp_path / "runs")) | {"run_name": None}
    return data | {k: files[v[1:]] if isinstance(v, str) and v.startswith("@") else v for k, v in overrides.items()}


def hide(monkeypatch, absent) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name.split(".")[0] in absent else real(name, *a))


def train_verdict(tmp_path, monkeypatch, capsys, data) -> tuple[int | str, str]:
    """``ftui train CONFIG.yaml`` in this process: its exit code and what it said, or "started"
    when it passed every check (the run directory is not made: create_run, which ftui.ops.start
    calls first, stops it)."""
    import ftui.jobs.launch

    def stop(cfg, name=None):
        raise Started(cfg)

    monkeypatch.setattr(ftui.jobs.launch, "create_run", stop)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(data))
    capsys.readouterr()
    try:
        code: int | str = main(["train", str(path)])
    except Started:
        code = "started"
    return code, " ".join(capsys.readouterr().err.split())


@pytest.mark.parametrize("name,overrides,absent,verdict", TABLE, ids=[row[0] for row in TABLE])
def test_the_form_and_ftui_train_give_one_verdict(tmp_path, monkeypatch, capsys, files, name, overrides, absent, verdict):
    monkeypatch.chdir(tmp_path)
    hide(monkeypatch, absent)
    data = config_data(tmp_path, files, overrides)
    form = preflight(data)  # what the launch form's validation worker calls (LaunchScreen.check_form)
    code, said = train_verdict(tmp_path, monkeypatch, capsys, data)
    if verdict is None:
        assert form.ready and form.problems == [], form.problems
        assert code == "started", said
    else:
        field, words = verdict
        assert not form.ready
        assert [p for p in form.problems if p.field == field and words in p.message], form.problems
        assert code == 2 and words in said and field in said, said
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())  # no run directory either way


def test_a_rope_models_cutoff_is_said_by_both(tmp_path, monkeypatch, capsys, files):
    monkeypatch.chdir(tmp_path)
    data = config_data(tmp_path, files, {"cutoff_len": 1024})
    (warning,) = preflight(data).warnings
    assert "max_position_embeddings 512" in warning and "rope_scaling" in warning
    code, said = train_verdict(tmp_path, monkeypatch, capsys, data)
    assert code == "started" and "max_position_embeddings 512" in said and "rope_scaling" in said


def test_one_snapshot_of_the_machine_per_validation(monkeypatch, tmp_path):
    """The machine is read once per validation (NVML and the import system), and the model's
    config.json once, whatever number of rules ask about them."""
    import ftui.machine.facts
    import ftui.plan.planner

    gathered, reads = [], []
    real_gather, real_read = MachineFacts.gather.__func__, ftui.plan.planner.read_model_config
    monkeypatch.setattr(ftui.machine.facts.MachineFacts, "gather", classmethod(lambda cls, *a: gathered.append(a) or real_gather(cls, *a)))
    monkeypatch.setattr(ftui.plan.planner, "read_model_config", lambda name: reads.append(name) or real_read(name))
    monkeypatch.chdir(tmp_path)
    verdict = preflight(demo_data(output_dir=str(tmp_path / "runs")) | {"flash_attn": "sdpa", "cutoff_len": 1024, "finetuning_type": "lora",
                                                                       "lora_target": "q_proj", "device": "auto"})
    assert verdict.ready, verdict.problems
    assert len(gathered) == 1 and len(reads) == 1


async def test_the_form_refuses_a_bad_json_line_and_says_ready_for_the_good_file(tmp_path, files):
    app = make_app(tmp_path)
    async with app.run_test(size=(120, 45)) as pilot:
        screen = app.screen
        await until(pilot, lambda: screen._ready)
        app.screen.action_demo()
        await until(pilot, lambda: screen.query_one("#f-run_name").value == "demo")
        screen.fill({"dataset": files["bad"]})
        await until(pilot, lambda: bool(screen.query("#e-dataset")) and "line 2 is not JSON" in str(screen.query_one("#e-dataset", Label).render()))
        assert screen.query_one("#start", Button).disabled
        screen.fill({"dataset": files["good"]})
        await until(pilot, lambda: not screen.query_one("#start", Button).disabled)


def test_lora_targets_are_checked_against_the_architectures_whose_modules_are_known():
    from ftui.config.load import demo_config
    from ftui.config.model_checks import lora_target_problems

    lora = demo_config(finetuning_type="lora").model_copy(update={"lora_target": "c_attn,q_proj"})
    (problem,) = lora_target_problems(lora, {"model_type": "gpt2"})
    assert "no module named q_proj" in problem.message and "c_attn, c_proj, c_fc" in problem.message
    assert lora_target_problems(lora.model_copy(update={"lora_target": "self_attn.q_proj"}), {"model_type": "llama"}) == []
    assert lora_target_problems(lora, {"model_type": "some_new_arch"}) == []  # modules known only once it loads
    assert lora_target_problems(lora.model_copy(update={"lora_target": "all"}), {"model_type": "gpt2"}) == []


def test_encoded_data_in_tokenized_path_is_read_instead_of_the_files(tmp_path, files):
    """LLaMA-Factory's tokenized_path: when it holds encoded data the datasets are not read, so
    their records are not judged (their registry entries still are)."""
    from ftui.config.load import demo_config
    from ftui.config.file_checks import dataset_problems

    encoded = tmp_path / "encoded"
    encoded.mkdir()
    cfg = demo_config(dataset=files["bad"])
    assert dataset_problems(cfg)
    (encoded / "dataset_dict.json").write_text("{}")
    assert dataset_problems(cfg.model_copy(update={"tokenized_path": str(encoded)})) == []
