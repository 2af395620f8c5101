"""Audios checked before a run (issue 42, Qwen2-Audio): preflight against the model, the
template and the other keys; the first records' files decoded whole; a cutoff_len that cuts an
audio's tokens; and a micro batch without audio running the tower on the stand-in."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("av", reason="needs PyAV, which the test extra installs: pip install -e '.[test]'")

from ftui.config.preflight import preflight  # noqa: E402

DATA = Path(__file__).resolve().parent / "data" / "llamafactory_vlm" / "data"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from alm_models import audio_dir

    return audio_dir(tmp_path_factory.mktemp("alm"))


def run_config(tmp_path: Path, model: Path | str, **extra) -> dict:
    return {"model_name_or_path": str(model), "dataset": "mllm_audio_demo", "dataset_dir": str(DATA), "template": "qwen2_audio",
            "device": "cpu", "output_dir": str(tmp_path / "runs")} | extra


def problems(tmp_path: Path, model: Path | str, **extra) -> dict[str, str]:
    return {p.field: p.message for p in preflight(run_config(tmp_path, model, **extra)).problems}


def test_preflight_accepts_mllm_audio_demo_for_a_tiny_qwen2_audio(tmp_path, tiny):
    verdict = preflight(run_config(tmp_path, tiny))
    assert verdict.ready, [str(p) for p in verdict.problems]


def test_preflight_wants_a_qwen2_audio_model_its_template_and_rows_as_they_are(tmp_path, tiny):
    from ftui.rundir.paths import DEMO_MODEL

    said = problems(tmp_path, DEMO_MODEL, model_init="random", template=None)
    assert "has audios, but ftui-demo (model_type llama) does not read audio" in said["dataset"]
    said = problems(tmp_path, DEMO_MODEL, model_init="random", dataset="identity")
    assert "template qwen2_audio encodes audios for Qwen2-Audio, but this model (model_type llama)" in said["template"]
    assert "set template: qwen2_audio" in problems(tmp_path, tiny, template="qwen")["template"]
    assert "set template: qwen2_audio" in problems(tmp_path, tiny, template=None)["template"]
    assert "audio_sampling_rate: 16000" in problems(tmp_path, tiny, audio_sampling_rate=22050)["audio_sampling_rate"]
    assert "packing examples with audios" in problems(tmp_path, tiny, packing=True)["packing"]
    assert "tokenized_path" in problems(tmp_path, tiny, tokenized_path=str(tmp_path / "enc"))["tokenized_path"]
    assert "stage dpo with audios is not supported yet" in problems(tmp_path, tiny, stage="dpo")["dataset"]
    assert "Qwen2-Audio reads audios only" in problems(tmp_path, tiny, dataset="mllm_demo")["dataset"]
    assert "use_audio_in_video" in problems(tmp_path, tiny, use_audio_in_video=True)


def test_preflight_decodes_the_first_records_audios_whole(tmp_path, tiny):
    """A file damaged after its first frames opens and decodes its start: only decoding it
    whole finds the damage (here: the mp3's bytes from a third on replaced by noise)."""
    import shutil

    data = tmp_path / "data"
    shutil.copytree(DATA, data)
    mp3 = data / "mllm_demo_data" / "1.mp3"
    raw = bytearray(mp3.read_bytes())
    raw[len(raw) // 3:] = bytes((i * 37 + 11) % 256 for i in range(len(raw) - len(raw) // 3))
    mp3.write_bytes(bytes(raw))
    from ftui.data.audio_files import probe_audio

    assert probe_audio(str(mp3)).sample_rate == 48000  # its header and first frame read well
    said = problems(tmp_path, tiny, dataset_dir=str(data))
    assert "record 0" in said["dataset"] and "1.mp3" in said["dataset"] and "cannot be read as audio" in said["dataset"]
    shutil.copy(DATA / "mllm_demo_data" / "1.mp3", mp3)
    (data / "mllm_demo_data" / "2.wav").write_bytes(b"RIFF\x24\x00\x00\x00WAVEfmt ")  # a header and nothing else
    said = problems(tmp_path, tiny, dataset_dir=str(data))
    assert "record 1" in said["dataset"] and "2.wav" in said["dataset"] and "cannot be read as audio" in said["dataset"]


def test_a_cutoff_len_that_cuts_an_audios_tokens_is_refused_by_name(tiny, tmp_path):
    from ftui.config.load import demo_config
    from ftui.data.records import DataFormatError
    from ftui.runner.stages.sft import SFTStage
    from transformers import AutoTokenizer

    cfg = demo_config(model_name_or_path=str(tiny), model_init="pretrained", stage="sft", template="qwen2_audio",
                      dataset="mllm_audio_demo", dataset_dir=str(DATA), cutoff_len=64, output_dir=str(tmp_path / "runs"))
    stage = SFTStage.__new__(SFTStage)
    stage.cfg, stage.tokenizer = cfg, AutoTokenizer.from_pretrained(str(tiny))
    encode = stage.record_encoder()
    from ftui.data.registry import resolve_datasets
    [spec] = resolve_datasets("mllm_audio_demo", str(DATA))
    record = json.loads((DATA / "mllm_audio_demo.json").read_text())[0]
    enc = encode(record, spec, 0)
    with pytest.raises(DataFormatError, match=r"record 0: its audios take 101 tokens and cutoff_len=64 cuts \d+ of them"):
        stage.check_image_tokens(enc, spec, 0)


def test_a_micro_batch_without_audio_runs_the_tower_on_the_hidden_stand_in(tiny):
    import torch
    import transformers

    from ftui.runner.data import Collator, Example
    from ftui.runner.media_batch import media_collation

    model = transformers.Qwen2AudioForConditionalGeneration.from_pretrained(str(tiny))
    batch = Collator(0, media=media_collation(model))([Example([5, 6, 7, 8], [-100, 6, 7, 8], real_tokens=4)])
    assert batch.media is not None and batch.input_ids.shape[1] == 4 + 2
    assert batch.attention_mask[0, 4:].tolist() == [0, 0] and batch.labels[0, 4:].tolist() == [-100, -100]
    inputs = batch.media.inputs()
    assert set(inputs) == {"input_features", "feature_attention_mask"}
    out = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask, **inputs)
    assert torch.isfinite(out.logits).all()
    out.logits[0, :4].sum().backward()
    assert model.model.audio_tower.layers[0].fc1.weight.grad is not None  # the tower took part in the step


def test_ftui_data_lists_each_audio_with_its_length_and_tokens():
    from ftui.data.media_listing import list_record, listing_text
    from ftui.data.registry import resolve_datasets

    reference = json.loads((DATA.parent / "reference_audio.json").read_text())
    [spec] = resolve_datasets("mllm_audio_demo", str(DATA))
    records = json.loads((DATA / "mllm_audio_demo.json").read_text())
    for i, (record, ref) in enumerate(zip(records, reference["examples"])):
        listing = list_record(record, spec, i, None)
        assert listing.problem is None and not listing.images
        [audio] = listing.audios
        frames = ref["feature_attention_mask"][0]
        assert audio.tokens == ((frames - 1) // 2 + 1 - 2) // 2 + 1  # LLaMA-Factory's count from its mask
        assert audio.shown == record["audios"][0]
        assert f"audio 1: {record['audios'][0]}" in listing_text(listing).plain
    assert listing.audios[0].sample_rate == 16000 and abs(listing.audios[0].seconds - 93680 / 16000) < 0.01


def test_the_planner_plans_no_image_for_an_audio_model_whose_data_it_cannot_read(tiny, tmp_path):
    from ftui.config.load import demo_config
    from ftui.plan.planner import estimate_for

    cfg = demo_config(model_name_or_path=str(tiny), stage="sft", template="qwen2_audio", dataset="mllm_audio_demo",
                      dataset_dir=str(tmp_path / "elsewhere"), output_dir=str(tmp_path / "runs"))
    plan = estimate_for(cfg)
    assert plan.notes is not None and not any("image" in note for note in plan.notes)


def test_predict_and_chat_with_audio_are_refused_by_name(tiny):
    from ftui.data.records import DataFormatError
    from ftui.data.registry import resolve_datasets
    from ftui.presets.vision_families import vision_family
    from ftui.runner.chat_images import chat_images
    from ftui.runner.stages.sft import SFTStage

    [spec] = resolve_datasets("mllm_audio_demo", str(DATA))
    record = json.loads((DATA / "mllm_audio_demo.json").read_text())[0]
    with pytest.raises(DataFormatError, match="record 0 has audios: predicting or chatting with audios is not supported yet"):
        SFTStage.prompt_media(record, spec, 0)
    images, why = chat_images(vision_family("qwen2_audio"), [tiny], None)
    assert images is None and "reads audios, not images" in why
