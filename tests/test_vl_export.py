"""ftui export of a vision-language run (issue 42): a tiny Qwen2-VL trained 2 steps on
LLaMA-Factory's mllm_demo with `ftui train`, exported as a merged model that plain transformers
loads (``AutoModelForImageTextToText``, ``AutoImageProcessor``) with its processor files, its
chat template (image parts rendered as the family's vision tokens) and the vision tower under
transformers' checkpoint names; on an input with an image it gives the logits of base +
adapter (or of final/). GGUF is refused by name for a VLM (llama.cpp needs a projector file,
mmproj, that ftui's writer does not make), before any job starts.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.test_export import export_in_process
from tests.vlm_models import vlm_dir

QUESTION = "What colour is it?"
CLASSES = {"qwen2_vl": "Qwen2VLForConditionalGeneration", "qwen2_5_vl": "Qwen2_5_VLForConditionalGeneration",
           "qwen3_vl": "Qwen3VLForConditionalGeneration"}


@pytest.fixture(scope="module")
def vl_model(tmp_path_factory) -> Path:
    return vlm_dir("qwen2_vl", tmp_path_factory.mktemp("vl-export-models"))


@pytest.fixture(scope="module")
def vl_runs(vl_model, tmp_path_factory, lf_data):
    """(method, family) -> a finished 2-step run (final/ and checkpoints/step-2), trained once per module."""
    from ftui.config.load import demo_config
    from tests.conftest import train_sync
    from tests.vlm_models import FAMILIES

    root = tmp_path_factory.mktemp("vl-export-runs")
    made: dict[tuple[str, str], Path] = {}

    def run(method: str, family: str = "qwen2_vl") -> Path:
        if (method, family) not in made:
            model = vl_model if family == "qwen2_vl" else vlm_dir(family, vl_model.parent)
            cfg = demo_config(model_name_or_path=str(model), model_init="pretrained", stage="sft", template=FAMILIES[family]["template"],
                              dataset="mllm_demo", dataset_dir=str(lf_data), finetuning_type=method,
                              freeze_vision_tower=method != "full", freeze_trainable_layers=1, max_steps=2, save_steps=2,
                              per_device_train_batch_size=2, learning_rate=1e-2, image_max_pixels=128 * 128, cutoff_len=512,
                              engine="single", nproc_per_node=1, output_dir=str(root), logging_steps=1,
                              run_name=f"vl-{method}-{family}")
            run_dir, _events, proc = train_sync(cfg)
            assert proc.returncode == 0, (run_dir / "train.log").read_text()[-4000:]
            made[(method, family)] = run_dir
        return made[(method, family)]

    return run


def picture(tmp_path: Path) -> Path:
    """A small image (under the run's image_max_pixels, so training's resize leaves it as it is and
    plain transformers sees what ftui encoded)."""
    from PIL import Image

    path = tmp_path / "square.png"
    Image.new("RGB", (56, 84), (120, 30, 200)).save(path)
    return path


def plain_inputs(out: Path, image: Path) -> dict[str, torch.Tensor]:
    """What a user of plain transformers feeds the export: its chat template over a message with
    an image part, the image pad expanded to the image's grid and the token types (1 at image
    tokens), as the family's processor makes them, and its image processor's tensors."""
    from PIL import Image
    from transformers import AutoImageProcessor, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(out)
    processor = AutoImageProcessor.from_pretrained(out)
    pixels = processor(images=[Image.open(image)], return_tensors="pt")
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": QUESTION}]}]
    text = tok.apply_chat_template(messages, tokenize=False)
    tokens = int(pixels["image_grid_thw"][0].prod()) // processor.merge_size ** 2
    assert text.count("<|image_pad|>") == 1
    ids = tok(text.replace("<|image_pad|>", "<|image_pad|>" * tokens), add_special_tokens=False, return_tensors="pt")
    types = (ids["input_ids"] == tok.convert_tokens_to_ids("<|image_pad|>")).long()
    return {"input_ids": ids["input_ids"], "attention_mask": ids["attention_mask"], "mm_token_type_ids": types,
            "pixel_values": pixels["pixel_values"], "image_grid_thw": pixels["image_grid_thw"]}


def logits(model, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    with torch.no_grad():
        return model(**inputs).logits.float()


def trained(run_dir: Path, which: str = "final"):
    """The run's model as ftui loads it: the base with the adapter through peft, or final/."""
    from ftui.config.load import load_config
    from ftui.runner.weights import load_weights, locate

    cfg, _ = load_config(run_dir / "config.yaml")
    return load_weights(locate(run_dir, cfg, which), cfg, torch.float32)


def tensors(path: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(path / "model.safetensors"))


def check_export(out: Path, base: Path, run_dir: Path, image: Path, want_model, family: str = "qwen2_vl") -> torch.Tensor:
    """The files, names and loading every VL export must have; returns its logits on the image."""
    from transformers import AutoModelForImageTextToText

    files = {p.name for p in out.iterdir()}
    assert {"config.json", "model.safetensors", "preprocessor_config.json", "chat_template.jinja", "tokenizer.json",
            "generation_config.json", "Modelfile", "ftui_export.json"} <= files, files
    assert not any(name.startswith("adapter") for name in files)
    assert (out / "preprocessor_config.json").read_bytes() == (base / "preprocessor_config.json").read_bytes()
    exported, original = tensors(out), tensors(base)
    assert exported.keys() == original.keys()  # transformers' checkpoint names, the base's
    assert any("visual.blocks." in k for k in exported) and any("visual.merger." in k for k in exported)
    for name, tensor in exported.items():
        assert tensor.shape == original[name].shape, name
    model = AutoModelForImageTextToText.from_pretrained(out)
    assert type(model).__name__ == CLASSES[family] and not hasattr(model, "peft_config")
    inputs = plain_inputs(out, image)
    got, want = logits(model, inputs), logits(want_model, inputs)
    assert torch.allclose(got, want, atol=1e-5), (got - want).abs().max()
    provenance = json.loads((out / "ftui_export.json").read_text())
    assert provenance["vision_family"] == family and provenance["image_max_pixels"] == 128 * 128
    return got


@pytest.mark.dist
def test_a_lora_vl_run_exports_a_merged_model_plain_transformers_runs_on_an_image(vl_runs, vl_model, tmp_path):
    run_dir = vl_runs("lora")
    image = picture(tmp_path)
    want = trained(run_dir)  # base + adapter, through peft
    assert hasattr(want, "peft_config")
    for which in ("final", "2"):
        out = tmp_path / f"lora-{which}"
        result = export_in_process(run_dir, out, which)
        assert result["vision"] is True
        got = check_export(out, vl_model, run_dir, image, want)
    from transformers import AutoModelForImageTextToText

    base = logits(AutoModelForImageTextToText.from_pretrained(vl_model), plain_inputs(out, image))
    assert not torch.allclose(got, base, atol=1e-3)  # the adapter is in the merged weights


@pytest.mark.dist
def test_the_exported_chat_template_puts_the_image_where_ftui_trained_it(vl_runs, vl_model, tmp_path):
    """The export's chat template over an image part gives the ids ftui's own encoding (LLaMA-
    Factory's, checked in test_vl_encode) gives the same record with its <image> placeholder;
    text-only messages and a system prompt render as the run's template."""
    from tests.test_vl_encode import mllm_demo_spec, stage_encode, stage_for

    out = tmp_path / "lora"
    export_in_process(vl_runs("lora"), out)
    image = picture(tmp_path)
    record = {"messages": [{"role": "user", "content": "<image>" + QUESTION}, {"role": "assistant", "content": "Purple."}],
              "images": [str(image)]}
    [example] = stage_encode(stage_for(vl_model, "qwen2_vl", 512, image_max_pixels=128 * 128), [record], mllm_demo_spec())
    ids = plain_inputs(out, image)["input_ids"][0].tolist()
    assert example.input_ids[:len(ids)] == ids
    assert example.labels[len(ids) - 1] == -100 and example.labels[len(ids)] != -100  # the prompt ends where the answer starts

    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(out)
    text = tok.apply_chat_template([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"},
                                    {"role": "assistant", "content": [{"type": "text", "text": "Hello."}]},
                                    {"role": "user", "content": [{"type": "video"}, {"type": "text", "text": "And this?"}]}],
                                   tokenize=False)
    assert text == ("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
                    "Hello.<|im_end|>\n<|im_start|>user\n<|vision_start|><|video_pad|><|vision_end|>And this?<|im_end|>\n"
                    "<|im_start|>assistant\n")


@pytest.mark.dist
def test_autoprocessor_loads_the_export_and_makes_the_same_inputs_where_torchvision_loads(vl_runs, tmp_path):
    """With torchvision (a GPU install; transformers 5.24 builds no Qwen2-VL processor without
    it), the family's AutoProcessor reads the export: the processor's chat template is the
    export's, and its inputs are the ones the tests above build from the tokenizer and image
    processor. Checked by hand with torch 2.14.1 + torchvision 0.29.1; skipped on this CPU wheel."""
    from transformers.utils import is_torchvision_available

    if not is_torchvision_available():
        pytest.skip("transformers builds no Qwen2-VL AutoProcessor without torchvision, which this torch cannot load")
    from PIL import Image
    from transformers import AutoModelForImageTextToText, AutoProcessor

    out = tmp_path / "lora"
    export_in_process(vl_runs("lora"), out)
    image = picture(tmp_path)
    processor = AutoProcessor.from_pretrained(out)
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": QUESTION}]}]
    text = processor.apply_chat_template(messages, tokenize=False)
    inputs = processor(text=[text], images=[Image.open(image)], return_tensors="pt")
    want = plain_inputs(out, image)
    assert inputs["input_ids"].tolist() == want["input_ids"].tolist()
    assert torch.allclose(inputs["pixel_values"], want["pixel_values"], atol=1e-6)
    assert torch.isfinite(logits(AutoModelForImageTextToText.from_pretrained(out), dict(inputs))).all()


@pytest.mark.slow
@pytest.mark.parametrize("method", ["full", "freeze"])
def test_full_and_freeze_vl_runs_export_what_they_trained_vision_tower_included(method, vl_runs, vl_model, tmp_path):
    run_dir = vl_runs(method)
    image = picture(tmp_path)
    want = trained(run_dir)
    final = tensors(run_dir / "final")
    before = tensors(vl_model)
    for which in ("final", "2"):
        out = tmp_path / f"{method}-{which}"
        export_in_process(run_dir, out, which)
        check_export(out, vl_model, run_dir, image, want)
        exported = tensors(out)
        for name, tensor in exported.items():
            assert torch.allclose(tensor, final[name], atol=1e-6), name  # final/'s weights, the checkpoint's too
        vision_changed = any(not torch.equal(exported[k], before[k]) for k in exported if "visual.blocks." in k)
        assert vision_changed is (method == "full")  # full unfroze the vision tower; freeze kept it (LF's default)


@pytest.mark.slow
@pytest.mark.parametrize("family", ["qwen2_5_vl", "qwen3_vl"])
def test_the_other_qwen_vl_families_export_a_lora_run_the_same_way(family, vl_runs, vl_model, tmp_path):
    run_dir = vl_runs("lora", family)
    out = tmp_path / family
    export_in_process(run_dir, out)
    check_export(out, vlm_dir(family, vl_model.parent), run_dir, picture(tmp_path), trained(run_dir), family)


def test_a_vl_export_without_processor_files_is_refused_naming_the_file(vl_runs, vl_model, tmp_path):
    """A VL model's export needs the image processor's settings; a run whose final/ and base lost
    them says which file and where to put it."""
    from ftui.runner.weights import WeightsError

    base = tmp_path / "base"
    shutil.copytree(vl_model, base)
    run_dir = tmp_path / "run"
    shutil.copytree(vl_runs("lora"), run_dir, ignore=shutil.ignore_patterns("export", ".store-*"))
    config = (run_dir / "config.yaml").read_text()
    (run_dir / "config.yaml").write_text(config.replace(str(vl_model), str(base)))
    (base / "preprocessor_config.json").unlink()
    (run_dir / "final" / "preprocessor_config.json").unlink()
    with pytest.raises(WeightsError, match=r"preprocessor_config\.json.*put the base model's preprocessor_config\.json in"):
        export_in_process(run_dir, tmp_path / "out")


@pytest.mark.dist
def test_gguf_for_a_vl_model_is_refused_by_name_before_any_job(vl_runs, tmp_path):
    """The CLI, the prepare step the screen uses and the GGUF writer itself each say why and what to
    use instead (llama.cpp's converter, once with --mmproj), and no job directory is made."""
    from ftui.jobs.export import ExportError, prepare_export
    from ftui.runner.gguf_export import GGUFError, write_gguf
    from ftui.tui.screens.export import assess

    run_dir = vl_runs("lora")
    jobs_before = sorted((run_dir / "export").iterdir()) if (run_dir / "export").exists() else []
    proc = subprocess.run([sys.executable, "-m", "ftui.cli.main", "export", str(run_dir), "--out", str(tmp_path / "g"), "--gguf"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    said = " ".join(proc.stderr.split())
    assert "vision-language model (qwen2_vl)" in said and "--mmproj" in said and "convert_hf_to_gguf.py" in said, said
    with pytest.raises(ExportError, match="mmproj"):
        prepare_export(run_dir, which=None, out=tmp_path / "g", gguf="q8_0")
    assert "mmproj" in assess(run_dir, None, str(tmp_path / "g"), "bf16", "5GB", "f16", False, None).plain
    assert jobs_before == (sorted((run_dir / "export").iterdir()) if (run_dir / "export").exists() else [])
    assert not (tmp_path / "g").exists()

    out = tmp_path / "merged"
    export_in_process(run_dir, out)
    with pytest.raises(GGUFError, match=r"vision-language model \(qwen2_vl\).*--mmproj"):
        write_gguf(out, tmp_path / "x.gguf", "f16")
    assert not (tmp_path / "x.gguf").exists()


@pytest.mark.dist
def test_the_export_event_names_llama_cpps_conversion_for_a_vl_model(vl_runs, tmp_path):
    """`ftui export` as a job: its export event lists the files and, for a VLM, llama.cpp's two
    conversion commands (the model, then --mmproj) beside ftui chat."""
    from ftui.rundir.event_reader import read_all

    run_dir = vl_runs("lora")
    out = tmp_path / "job-export"
    proc = subprocess.run([sys.executable, "-m", "ftui.cli.main", "export", str(run_dir), "--out", str(out), "--dtype", "bf16"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == str(out)
    job = sorted((run_dir / "export").iterdir())[-1]
    result = next(e for e in read_all(job / "events.jsonl") if e["event"] == "export")
    assert "preprocessor_config.json" in result["files"]
    assert any(c.endswith(f"convert_hf_to_gguf.py {out} --mmproj") for c in result["commands"]), result["commands"]
    assert "--mmproj" in proc.stdout
    from transformers import AutoModelForImageTextToText

    config = json.loads((out / "config.json").read_text())
    assert config["dtype"] == config["text_config"]["dtype"] == config["vision_config"]["dtype"] == "bfloat16"
    model = AutoModelForImageTextToText.from_pretrained(out, dtype="auto")
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
