"""Audios for Qwen2-Audio (issue 42): LLaMA-Factory 0.9.5's mllm_audio_demo encoded token for
token, its torchaudio resampling matched, bad files named before training, and `ftui train`
end to end. tests/data/llamafactory_vlm/reference_audio.json is what LLaMA-Factory made of the
3 records for the tiny model of tests/alm_models.py (make_reference.py --audio): ids and labels
must be equal, the feature attention masks equal, the input features within 1e-4 (ftui decodes
with PyAV and resamples with its port of torchaudio's resampler; LLaMA-Factory with torchaudio).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("av", reason="needs PyAV, which the test extra installs: pip install -e '.[test]'")

from ftui.data.audio_files import audio_info, audio_tokens  # noqa: E402
from ftui.data.media import record_media  # noqa: E402
from ftui.data.media_files import MediaFileError  # noqa: E402
from ftui.data.records import DatasetSpec, to_conversation  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
REF_DIR = ROOT / "tests" / "data" / "llamafactory_vlm"
DATA = REF_DIR / "data"
REFERENCE = json.loads((REF_DIR / "reference_audio.json").read_text())
RECORDS = json.loads((DATA / "mllm_audio_demo.json").read_text())


def audio_spec(file_name: str = "mllm_audio_demo.json", media_dir: Path = DATA) -> DatasetSpec:
    entry = json.loads((DATA / "dataset_info.json").read_text())["mllm_audio_demo"]
    return DatasetSpec(name="mllm_audio_demo", file_name=str(media_dir / file_name), formatting=entry["formatting"],
                       columns=entry["columns"], tags=entry["tags"], media_dir=str(media_dir))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from alm_models import audio_dir

    return audio_dir(tmp_path_factory.mktemp("alm"))


def test_the_resampler_port_gives_torchaudios_samples():
    from ftui.runner.audio.decode import regularize_audio

    assert set(REFERENCE["resampled"]) == {"1.mp3", "4.mp3"}  # 48 kHz and 44.1 kHz stereo
    for name, ref in REFERENCE["resampled"].items():
        wave = regularize_audio(str(DATA / "mllm_demo_data" / name), 16000)
        assert len(wave) == ref["length"]
        np.testing.assert_allclose(wave[::REFERENCE["sample_stride"]], ref["strided"], atol=1e-6, rtol=0)
        assert abs(float(wave.astype(np.float64).sum()) - ref["sum"]) < 1e-4


def _encoder(model_dir: Path, cutoff: int = 1024):
    from transformers import AutoTokenizer

    from ftui.config.schema import RunConfig
    from ftui.data.chat_template import fix_tokenizer
    from ftui.data.conversation import EncodeOptions, Renderer
    from ftui.presets.templates import TEMPLATES
    from ftui.runner.audio.encode import audio_encoder

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    fix_tokenizer(tok, TEMPLATES["qwen2_audio"])
    cfg = RunConfig(model_name_or_path=str(model_dir), template="qwen2_audio", dataset="mllm_audio_demo")
    return audio_encoder(Renderer("qwen2_audio", tok, EncodeOptions(cutoff_len=cutoff)), "qwen2_audio", "qwen2_audio",
                         str(model_dir), cfg)


def test_mllm_audio_demo_encodes_as_llamafactory_does(tiny):
    import transformers

    from ftui.runner.data import Collator, Example
    from ftui.runner.media_batch import media_collation

    encoder = _encoder(tiny)
    spec = audio_spec()
    model = transformers.Qwen2AudioForConditionalGeneration.from_pretrained(str(tiny))
    collation = media_collation(model)
    assert len(REFERENCE["examples"]) == len(RECORDS) == 3
    for i, (record, ref) in enumerate(zip(RECORDS, REFERENCE["examples"])):
        paths = record_media(record, spec, i)["audios"]
        enc = encoder.encode(to_conversation(record, spec, i), paths, spec, i)
        assert enc.input_ids == ref["input_ids"]
        assert enc.labels == ref["labels"]
        assert encoder.missing_image_tokens(enc) == 0
        batch = Collator(0, media=collation)([Example(enc.input_ids, enc.labels, real_tokens=len(enc.input_ids), media=enc.media)])
        tensors = batch.media.tensors
        mask = tensors["feature_attention_mask"]
        assert mask.shape[-1] == ref["feature_attention_mask_width"]
        assert mask.sum(-1).tolist() == ref["feature_attention_mask"]
        features = tensors["input_features"].float().numpy()
        assert list(features.shape) == ref["input_features"]["shape"]
        np.testing.assert_allclose(features.reshape(-1)[::REFERENCE["feature_stride"]], ref["input_features"]["strided"],
                                   atol=1e-4, rtol=0)
        assert abs(float(features.astype(np.float64).sum()) - ref["input_features"]["sum"]) < 1e-2
        # the planner's count from the length alone is the plugin's
        assert audio_tokens(enc.media.samples[0]) == sum(1 for t in enc.input_ids if t == encoder.audio_token_id)


def test_the_stand_in_audio_is_the_feature_extractors_silence(tiny):
    import transformers
    from transformers import AutoFeatureExtractor

    from ftui.runner.audio.plugin import Qwen2AudioPlugin

    config = transformers.AutoConfig.from_pretrained(str(tiny))
    ids, tensors = Qwen2AudioPlugin.stand_in(config)
    out = AutoFeatureExtractor.from_pretrained(str(tiny))([np.zeros(1600)], sampling_rate=16000, return_attention_mask=True,
                                                         padding="max_length", return_tensors="pt")
    assert np.allclose(tensors["input_features"].numpy(), out["input_features"].numpy(), atol=1e-6)
    assert tensors["feature_attention_mask"].tolist() == out["attention_mask"].tolist()
    assert len(ids) == audio_tokens(1600) == 2 and set(ids) == {config.audio_token_index}


def _bad_dataset(tmp_path: Path, name: str, content: bytes | None) -> tuple[DatasetSpec, dict]:
    if content is not None:
        (tmp_path / name).write_bytes(content)
    record = {"messages": [{"role": "user", "content": "<audio>What is it?"}, {"role": "assistant", "content": "A sound."}],
              "audios": [name]}
    (tmp_path / "bad.json").write_text(json.dumps([record]))
    return audio_spec("bad.json", tmp_path), record


@pytest.mark.parametrize("name,content,words", [
    ("gone.wav", None, "no such file"),
    ("notes.wav", b"these are not samples\n" * 20, "cannot be read as audio"),
    ("image.mp3", (DATA / "mllm_demo_data" / "1.jpg").read_bytes() if (DATA / "mllm_demo_data" / "1.jpg").exists() else b"\xff\xd8\xff",
     "cannot be read as audio"),
    ("empty.flac", b"", "cannot be read as audio"),
])
def test_a_bad_audio_file_is_named_with_its_record_before_training(tmp_path, name, content, words):
    spec, record = _bad_dataset(tmp_path, name, content)
    with pytest.raises(MediaFileError) as err:
        record_media(record, spec, 0)
    message = str(err.value)
    assert words in message and "record 0" in message and name in message


def test_a_good_audio_files_duration_gives_the_plugins_token_count():
    info = audio_info(str(DATA / "mllm_demo_data" / "1.mp3"), audio_spec(), 0)
    assert info.sample_rate == 48000 and info.channels == 2
    assert abs(info.samples_at(16000) - REFERENCE["resampled"]["1.mp3"]["length"]) <= 1600  # mp3 padding aside
    assert audio_tokens(REFERENCE["resampled"]["1.mp3"]["length"]) == 101


def test_use_audio_in_video_is_refused_by_name():
    from ftui.config.rules import media_key_problems
    from ftui.config.schema import RunConfig

    problems = media_key_problems(RunConfig(model_name_or_path="m", dataset="d", use_audio_in_video=True))
    assert [p.field for p in problems] == ["use_audio_in_video"]


@pytest.mark.slow
def test_ftui_train_on_mllm_audio_demo_trains_a_tiny_qwen2_audio_with_lora(tmp_path):
    import torch

    from tests.conftest import train_sync
    from tests.alm_models import audio_dir

    from ftui.config.load import demo_config

    model = audio_dir(tmp_path / "models")
    cfg = demo_config(model_name_or_path=str(model), model_init="pretrained", stage="sft", template="qwen2_audio",
                      dataset="mllm_audio_demo", dataset_dir=str(DATA), finetuning_type="lora", max_steps=2,
                      per_device_train_batch_size=2, learning_rate=1e-2, cutoff_len=512, engine="single",
                      output_dir=str(tmp_path / "runs"), logging_steps=1, run_name="audio-lora")
    run_dir, events, proc = train_sync(cfg)
    assert proc.returncode == 0, (run_dir / "train.log").read_text()[-4000:]
    steps = [e for e in events if e["event"] == "step"]
    assert len(steps) == 2 and all(torch.isfinite(torch.tensor(e["loss"])) for e in steps)
    _check_export(run_dir, model, tmp_path / "export")


def _check_export(run_dir: Path, base: Path, out: Path) -> None:
    """The LoRA run exports a merged Qwen2-Audio that plain transformers loads with its
    processor; the export's chat template renders an audio part as the audio's three tokens,
    which the processor expands to the ids ftui trained the record with."""
    import torch
    from transformers import AutoModelForSeq2SeqLM, AutoProcessor

    from tests.test_export import export_in_process

    result = export_in_process(run_dir, out)
    assert result["vision"] is True
    model = AutoModelForSeq2SeqLM.from_pretrained(out)
    assert type(model).__name__ == "Qwen2AudioForConditionalGeneration" and not hasattr(model, "peft_config")
    processor = AutoProcessor.from_pretrained(out)
    question = RECORDS[0]["messages"][0]["content"].replace("<audio>", "")
    text = processor.apply_chat_template([{"role": "user", "content": [{"type": "audio"}, {"type": "text", "text": question}]}],
                                         tokenize=False, add_generation_prompt=True)
    assert "<|audio_bos|><|AUDIO|><|audio_eos|>" + question in text
    from ftui.runner.audio.decode import regularize_audio

    wave = regularize_audio(str(DATA / RECORDS[0]["audios"][0]), 16000)
    inputs = processor(text=text, audio=[wave], sampling_rate=16000, return_tensors="pt")
    prompt = inputs["input_ids"][0].tolist()
    assert prompt == REFERENCE["examples"][0]["input_ids"][:len(prompt)]  # LLaMA-Factory's ids, which ftui trained on
    with torch.no_grad():
        logits = model(**inputs).logits
    assert torch.isfinite(logits).all()


def test_the_planner_counts_the_audio_tower_and_projector_from_config_json(tiny):
    import torch
    import transformers

    from ftui.plan.model_shape import ModelShape
    from ftui.plan.vision_shape import vision_shape

    config = json.loads((tiny / "config.json").read_text())
    model = transformers.Qwen2AudioForConditionalGeneration.from_pretrained(str(tiny))
    shape = vision_shape(config)
    assert shape.tower == sum(p.numel() for p in model.model.audio_tower.parameters())
    assert shape.projector == sum(p.numel() for p in model.model.multi_modal_projector.parameters())
    assert shape.depth == 2 and shape.block == sum(p.numel() for p in model.model.audio_tower.layers[0].parameters())
    assert ModelShape.from_config(config).params == sum(p.numel() for p in model.parameters())
    with torch.device("meta"):  # Qwen2-Audio-7B's defaults
        big = transformers.Qwen2AudioForConditionalGeneration(transformers.Qwen2AudioConfig())
    default = vision_shape({"model_type": "qwen2_audio", "audio_config": {}})
    assert default.tower == sum(p.numel() for p in big.model.audio_tower.parameters())
    assert default.projector == sum(p.numel() for p in big.model.multi_modal_projector.parameters())


@pytest.mark.slow
def test_audio_and_text_records_train_together_batches_without_audio_on_the_stand_in(tmp_path, lf_data):
    import torch

    from tests.conftest import train_sync
    from tests.alm_models import audio_dir

    from ftui.config.load import demo_config

    cfg = demo_config(model_name_or_path=str(audio_dir(tmp_path / "models")), model_init="pretrained", stage="sft",
                      template="qwen2_audio", dataset="mllm_audio_demo,identity", dataset_dir=str(lf_data),
                      finetuning_type="lora", max_steps=3, per_device_train_batch_size=2, cutoff_len=256, engine="single",
                      output_dir=str(tmp_path / "runs"), logging_steps=1, run_name="audio-mixed")
    run_dir, events, proc = train_sync(cfg)
    assert proc.returncode == 0, (run_dir / "train.log").read_text()[-4000:]
    start = next(e for e in events if e["event"] == "run_start")
    assert start["padding_free"] is False and "M-RoPE" not in start["padding_free_why"]
    steps = [e for e in events if e["event"] == "step"]
    assert len(steps) == 3 and all(torch.isfinite(torch.tensor(e["loss"])) for e in steps)
