"""ftui export: a run's final/ or any engine's checkpoint as a standalone model directory.

The engine runs are the engine tests' (conftest.engine_runs: 8 steps, checkpoints at 4 and 8),
so no training happens here. The exported directory must load with transformers alone (no
peft) and give the trained model's logits: the LoRA adapter through peft, or the full weights
final/ holds (gathered by the engine at the end of training, independently of the checkpoint
readers the export uses).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ENGINE_MAX_STEPS
from tests.test_chat import ANSWER, QUESTION

IDS = [[1, 5, 9, 13, 17, 21, 25, 29]]


@pytest.fixture(scope="module")
def demo_copy(demo_run, tmp_path_factory) -> Path:
    """The session's demo run is shared read-only; exports add job directories to a run."""
    import shutil

    run = tmp_path_factory.mktemp("export-demo") / demo_run.name
    # .store-*: the ranks' FileStore, which the job's last process may still be removing
    shutil.copytree(demo_run, run, ignore=shutil.ignore_patterns("predict", "eval", "export", ".store-*"))
    return run


def export_in_process(run_dir: Path, out: Path, which: str | None = None, dtype: str = "fp32", **kw) -> dict:
    """The export job's body without a process of its own (the CLI test runs the real job)."""
    from ftui.config.load import load_config
    from ftui.jobs.export import prepare_export
    from ftui.runner.export import _Emitter, write_export
    from ftui.runner.faults import StopRequest

    job_dir, cfg, _needs = prepare_export(run_dir, which=which, out=out, dtype=dtype, **kw)
    spec = json.loads((job_dir / "job.json").read_text())
    cfg, _ = load_config(job_dir / "config.yaml")
    return write_export(spec, cfg, out, _Emitter(None), StopRequest())


def trained_logits(run_dir: Path):
    """What the run trained, as training left it: final/ (the adapter through peft)."""
    import torch

    from ftui.config.load import load_config
    from ftui.runner.weights import load_weights, locate

    cfg, _ = load_config(run_dir / "config.yaml")
    weights = locate(run_dir, cfg, "final")
    model = load_weights(weights, cfg, torch.float32)
    assert (weights.kind == "final-adapter") == hasattr(model, "peft_config")
    with torch.no_grad():
        return model(input_ids=torch.tensor(IDS)).logits


def plain_logits(out: Path):
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(out)
    assert not hasattr(model, "peft_config")
    with torch.no_grad():
        return model(input_ids=torch.tensor(IDS)).logits.float()


@pytest.mark.dist
@pytest.mark.parametrize("preset,method", [("single", "full"), ("zero3", "lora"), ("fsdp", "full")])
def test_export_of_final_and_last_checkpoint_gives_the_trained_logits(engine_runs, tmp_path, preset, method):
    import torch

    run_dir, _ = engine_runs(preset, method)
    want = trained_logits(run_dir)
    for which in ("final", str(ENGINE_MAX_STEPS)):
        out = tmp_path / f"{preset}-{which}"
        result = export_in_process(run_dir, out, which)
        assert result["params"] > 0
        files = {p.name for p in out.iterdir()}
        assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "generation_config.json",
                "Modelfile", "ftui_export.json"} <= files, files
        assert not any(name.startswith("adapter") for name in files)  # merged: no peft needed
        got = plain_logits(out)
        assert torch.allclose(got, want, atol=1e-5), (which, (got - want).abs().max())
        assert json.loads((out / "ftui_export.json").read_text())["kind"] == ("final" if method == "full" and which == "final"
                                                                            else "final-adapter" if which == "final"
                                                                            else "checkpoint-deepspeed" if preset == "zero3" else "checkpoint")


@pytest.mark.dist
def test_bf16_export_is_the_fp32_export_rounded_once(engine_runs, tmp_path):
    """LoRA merged in fp32 and cast once: each bf16 weight is the fp32 weight rounded to bf16."""
    import torch
    from safetensors.torch import load_file

    run_dir, _ = engine_runs("zero3", "lora")
    export_in_process(run_dir, tmp_path / "fp32", "final", "fp32")
    export_in_process(run_dir, tmp_path / "bf16", "final", "bf16")
    full = load_file(tmp_path / "fp32" / "model.safetensors")
    half = load_file(tmp_path / "bf16" / "model.safetensors")
    assert full.keys() == half.keys()
    for name, tensor in half.items():
        assert tensor.dtype == torch.bfloat16, name
        assert torch.equal(tensor, full[name].to(torch.bfloat16)), name
    assert json.loads((tmp_path / "bf16" / "config.json").read_text())["dtype"] == "bfloat16"


def test_shards_modelfile_generation_config_and_no_secrets(demo_copy, tmp_path):
    """Shards of the given size with their index; the tokenizer's chat template and stop
    tokens in generation_config.json and the Modelfile; a token in the run's config is
    nowhere in the export."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ftui.config.load import load_config
    from ftui.runner.export import _Emitter, write_export
    from ftui.runner.faults import StopRequest
    from ftui.jobs.export import prepare_export

    out = tmp_path / "sharded"
    job_dir, _, _ = prepare_export(demo_copy, which=None, out=out, dtype="fp32", max_shard_size="1MB")
    cfg, _ = load_config(job_dir / "config.yaml")
    cfg = cfg.model_copy(update={"hf_hub_token": "hf_SECRETtoken123", "template": "qwen"})
    write_export(json.loads((job_dir / "job.json").read_text()), cfg, out, _Emitter(None), StopRequest())
    index = json.loads((out / "model.safetensors.index.json").read_text())
    shards = sorted(set(index["weight_map"].values()))
    assert len(shards) >= 3 and all((out / s).stat().st_size <= 1_200_000 for s in shards), shards
    model = AutoModelForCausalLM.from_pretrained(out)
    assert torch.isfinite(model(input_ids=torch.tensor(IDS)).logits).all()

    tok = AutoTokenizer.from_pretrained(out)
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    gen = json.loads((out / "generation_config.json").read_text())
    eos = gen["eos_token_id"] if isinstance(gen["eos_token_id"], list) else [gen["eos_token_id"]]
    assert im_end in eos
    text = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False)
    assert text.endswith("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"), text  # qwen's format, the run's
    modelfile = (out / "Modelfile").read_text()
    assert 'PARAMETER stop "<|im_end|>"' in modelfile and '{{ .Content }}' in modelfile and "FROM .\n" in modelfile
    for path in out.iterdir():
        assert b"hf_SECRETtoken123" not in path.read_bytes(), path.name


def test_stop_leaves_nothing_and_force_replaces_only_when_complete(demo_copy, tmp_path):
    from ftui.jobs.export import prepare_export
    from ftui.safety.export_out import write_marker
    from ftui.runner.export import export
    from ftui.runner.faults import StopRequest
    from ftui.config.load import load_config
    from ftui.runner.engines import DistInfo

    out = tmp_path / "model"
    out.mkdir()
    (out / "model.safetensors").write_text("an earlier export's")
    write_marker(out, run="earlier")  # an earlier ftui export: the only non-empty out dir --force replaces
    job_dir, _, _ = prepare_export(demo_copy, which=None, out=out, dtype="fp32", force=True)
    cfg, _ = load_config(job_dir / "config.yaml")
    stop = StopRequest()
    stop.requested = True
    status, reason = export(job_dir, cfg, DistInfo.from_env(), None, stop, None)
    assert status == "stopped" and "nothing was written" in reason
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]  # no temporary directory left
    assert (out / "model.safetensors").read_text() == "an earlier export's"  # a stopped export replaces nothing

    status, _ = export(job_dir, cfg, DistInfo.from_env(), None, StopRequest(), None)
    assert status == "completed"
    assert (out / "model.safetensors").read_bytes() != b"an earlier export's" and (out / "config.json").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]


def test_refusals_say_what_to_do(demo_copy, tmp_path, capsys):
    """Every refusal is a usage error (exit 2) before any job starts, with the way out."""
    from ftui.cli.main import main

    jobs_before = sorted((demo_copy / "export").iterdir()) if (demo_copy / "export").exists() else []

    def refused(*args: str) -> str:
        assert main(["export", str(demo_copy), *args]) == 2
        return capsys.readouterr().err.replace("\n", " ")

    assert "inside the run directory" in refused("--out", str(demo_copy / "merged"))
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "x").write_text("x")
    assert "--force" in refused("--out", str(busy))
    assert "is not a size" in refused("--out", str(tmp_path / "a"), "--max-shard-size", "big")
    assert "has no checkpoint at step 999" in refused("--out", str(tmp_path / "a"), "--checkpoint", "999")
    straight = Path(tmp_path / "runs")  # the test's default runs root (FTUI_HOME=tmp_path)
    assert "runs root" in refused("--out", str(straight / "my-export"), "--root", str(straight))
    assert jobs_before == (sorted((demo_copy / "export").iterdir()) if (demo_copy / "export").exists() else [])  # no job was made


def test_memory_and_disk_are_checked_before_the_job(demo_copy, tmp_path):
    from ftui.jobs.export import ExportError, export_needs, prepare_export
    from ftui.config.load import load_config

    cfg, _ = load_config(demo_copy / "config.yaml")
    needs = export_needs(demo_copy, cfg, None, "bf16", None)
    assert needs.params == 820_352  # the demo's parameter count (its run_start says so too)
    assert needs.disk_bytes == needs.params * 2
    with_gguf = export_needs(demo_copy, cfg, None, "bf16", "q8_0")
    assert with_gguf.disk_bytes == needs.disk_bytes + int(needs.params * 34 / 32)
    assert export_needs(demo_copy, cfg, "4", "bf16", None).host_bytes > needs.host_bytes  # a checkpoint is read twice
    fake = tmp_path / "other-family"
    (fake / "base_model").mkdir(parents=True)
    config = json.loads((demo_copy / "base_model" / "config.json").read_text())
    (fake / "base_model" / "config.json").write_text(json.dumps({**config, "model_type": "gemma"}))
    assert export_needs(fake, cfg, None, "bf16", None).params == needs.params
    with pytest.raises(ExportError, match="'gemma'.*without --gguf"):
        export_needs(fake, cfg, None, "bf16", "f16")
    with pytest.raises(ExportError, match="host memory"):
        prepare_export(demo_copy, which=None, out=tmp_path / "x", available_memory=needs.host_bytes - 1)


@pytest.mark.dist
def test_cli_export_of_the_demo_chats_as_the_run(demo_copy, tmp_path):
    """`ftui export` runs as a job (events, watchable) and `ftui chat --model` on its result
    answers what `ftui chat --run --prompt` answers (greedy): the trained answer."""
    run = demo_copy
    out = tmp_path / "exported"
    proc = subprocess.run([sys.executable, "-m", "ftui.cli.main", "export", str(run), "--out", str(out), "--dtype", "fp32", "--gguf", "q8_0"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert lines[-1] == str(out) and any(f"ftui chat --model {out}" in line for line in lines), proc.stdout
    assert "host memory" in proc.stdout
    job = sorted((run / "export").iterdir())[-1]
    from ftui.rundir.event_reader import read_all

    events = read_all(job / "events.jsonl")
    kinds = [e["event"] for e in events]
    assert kinds[0] == "job_start" and events[0]["job"] == "export" and kinds[-1] == "run_end" and events[-1]["status"] == "completed"
    assert {e["phase"] for e in events if e["event"] == "progress"} == {"load", "save", "gguf"}  # full: no adapter to merge
    result = next(e for e in events if e["event"] == "export")
    assert result["out"] == str(out) and "model.safetensors" in result["files"]
    # The GGUF file reads back: every tensor of the model (tied: no output.weight), the chat
    # template the export's tokenizer has; the Modelfile loads it
    from gguf import GGUFReader
    from safetensors import safe_open
    from transformers import AutoTokenizer

    assert result["gguf"] == "exported-q8_0.gguf" and any(result["gguf"] in c for c in result["commands"])
    reader = GGUFReader(out / result["gguf"])
    with safe_open(out / "model.safetensors", "pt") as f:
        assert len(reader.tensors) == len(list(f.keys()))
    template = reader.fields["tokenizer.chat_template"]
    assert bytes(template.parts[template.data[0]]).decode() == AutoTokenizer.from_pretrained(out).chat_template
    assert f"FROM ./{result['gguf']}" in (out / "Modelfile").read_text()

    def answer(*source: str) -> str:
        p = subprocess.run([sys.executable, "-m", "ftui.cli.main", "chat", *source, "--prompt", QUESTION, "--temperature", "0",
                            "--device", "cpu"], capture_output=True, text=True, timeout=600)
        assert p.returncode == 0, p.stderr
        return p.stdout

    trained = answer("--run", str(run))
    assert trained.strip() == ANSWER
    assert answer("--model", str(out)) == trained


def test_modelfile_follows_the_template():
    """TEMPLATE is the run's format in Go template text (LLaMA-Factory's conversion), with the
    system text inside the first user turn for LLaMA-2-style templates; stop tokens once each."""
    from ftui.data.modelfile import modelfile, ollama_template
    from ftui.presets.templates import TEMPLATES

    qwen = modelfile(TEMPLATES["qwen"], None, "<|im_end|>", ["<|im_end|>", "<|im_end|>", "<|endoftext|>"], 32768)
    assert ('{{ if .System }}<|im_start|>system\n{{ .System }}<|im_end|>\n{{ end }}{{ range .Messages }}{{ if eq .Role "user" }}'
            '<|im_start|>user\n{{ .Content }}<|im_end|>\n<|im_start|>assistant\n{{ else if eq .Role "assistant" }}'
            '{{ .Content }}<|im_end|>\n') in qwen
    assert qwen.count('PARAMETER stop "<|im_end|>"') == 1 and 'PARAMETER stop "<|endoftext|>"' in qwen
    assert "PARAMETER num_ctx 4096" in qwen and 'SYSTEM """You are Qwen' in qwen
    llama2 = ollama_template(TEMPLATES["llama2"], "<s>", "</s>")
    assert llama2.startswith("{{ $first := true }}{{ range .Messages }}")
    assert '<s>[INST] {{ if $first }}{{ $first = false }}{{ if $.System }}<<SYS>>\n{{ $.System }}\n<</SYS>>\n\n{{ end }}{{ end }}{{ .Content }} [/INST]' in llama2
    own = modelfile(None, None, "<|im_end|>", ["<|im_end|>"], 512, source="./m-f16.gguf")
    assert "TEMPLATE" not in own and "FROM ./m-f16.gguf" in own and "PARAMETER num_ctx 512" in own
    assert '{{ "{{" }}' in ollama_template(TEMPLATES["qwen"].__class__(user=("{{ not an action {{content}}",)), None, None)


def test_force_never_replaces_a_directory_that_holds_runs(tmp_path, monkeypatch):
    """--force replaces what an out dir holds, so it must not be the runs root's parent, the
    current directory (`--out ""`), ftui's own directory or anything holding a run; an
    earlier ftui export it may replace, and nothing else (issue 39)."""
    from ftui.jobs.export import out_dir_problem
    from ftui.rundir.paths import default_runs_root, ftui_home

    def run_at(path: Path) -> Path:
        path.mkdir(parents=True)
        (path / "config.yaml").write_text("x: 1\n")
        (path / "events.jsonl").write_text("")
        return path

    monkeypatch.setenv("FTUI_HOME", str(tmp_path / "ftui-home"))
    (tmp_path / "ftui-home").mkdir()
    elsewhere = tmp_path / "otherhome"
    run_at(elsewhere / "runs" / "precious-run-1")
    plain = tmp_path / "old-export"
    plain.mkdir()
    (plain / "model.safetensors").write_text("old")
    work = tmp_path / "work"
    work.mkdir()
    (work / "notes.txt").write_text("mine")
    monkeypatch.chdir(work)
    assert "precious-run-1" in out_dir_problem(elsewhere, force=True)
    Path(default_runs_root()).mkdir(parents=True, exist_ok=True)
    assert "runs root" in out_dir_problem(Path(default_runs_root()), force=True)
    assert "FTUI_HOME" in out_dir_problem(ftui_home(), force=True)
    assert "current directory" in out_dir_problem(Path(""), force=True)
    assert "current directory" in out_dir_problem(tmp_path, force=True)  # holds it
    assert "ftui did not write" in out_dir_problem(plain, force=True)  # issue 39: only an earlier ftui export
    from ftui.safety.export_out import write_marker

    write_marker(plain, run="earlier")
    assert out_dir_problem(plain, force=True) is None
    assert "--force" in out_dir_problem(plain, force=False)
