"""Regenerates reference_audio.json (``make_reference.py --audio`` runs this): what
LLaMA-Factory 0.9.5 makes of its ``mllm_audio_demo`` dataset (3 records over 1.mp3 at 48 kHz
stereo, 2.wav and 3.flac at 16 kHz mono; copied to data/ with 4.mp3, 44.1 kHz stereo) for the
tiny Qwen2-Audio model of tests/alm_models.py, template qwen2_audio, stage sft: its
``get_dataset`` and its ``SFTDataCollatorWith4DAttentionMask`` on each example alone.

LLaMA-Factory decodes audio with ``torchaudio.load``, which needs torchcodec since torchaudio
2.9. The venv that made the stored file: /work/lfvenv-vl (LLaMA-Factory 0.9.5, transformers
5.24.0, torch 2.13.0 CPU, torchaudio 2.11.0) plus ``pip install --no-deps torchcodec==0.11.1``
and FFmpeg 5.1's shared libraries (Debian 12: ``apt-get install libavutil57 libavcodec59
libavformat59 libavdevice59 libavfilter8 libswscale6 libswresample4``); torchcodec 0.11.1
loads beside torch 2.13 there and decodes all four files.

    DISABLE_VERSION_CHECK=1 /work/lfvenv-vl/bin/python tests/data/llamafactory_vlm/make_reference.py --audio

Stored per example: input_ids, labels, the collator's feature_attention_mask as its number of
ones per audio (it is ones, then zeros), and of input_features [audios, 128, 3000] the shape,
sum, a digest of the float32 values rounded to 4 decimals and every 1009th value (a test
compares them within a tolerance). Stored apart (``resampled``): ``torchaudio.functional.
resample`` of the two files that are not at 16 kHz, after LLaMA-Factory's downmix (the mean
of the channels): each one's length, sum and every 50th sample, which ftui's port of that
resampler (ftui.runner.audio.resample) is checked against.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
DATA = HERE / "data"
FEATURE_STRIDE, SAMPLE_STRIDE = 1009, 50
AUDIO_4 = "mllm_demo_data/4.mp3"
ENTRY = {"file_name": "mllm_audio_demo.json", "formatting": "sharegpt", "columns": {"messages": "messages", "audios": "audios"},
         "tags": {"role_tag": "role", "content_tag": "content", "user_tag": "user", "assistant_tag": "assistant"}}


def write_audio_data(lf_data: Path) -> list[str]:
    """mllm_audio_demo.json and its files in data/, its entry added to dataset_info.json."""
    (DATA / "mllm_demo_data").mkdir(parents=True, exist_ok=True)
    records = json.loads((lf_data / "mllm_audio_demo.json").read_text())
    names = sorted({p for r in records for p in r["audios"]} | {AUDIO_4})  # 4.mp3: no record names it, resampled only
    for name in names:
        shutil.copy(lf_data / name, DATA / name)
    (DATA / "mllm_audio_demo.json").write_text(json.dumps(records, ensure_ascii=False, indent=1) + "\n")
    info_path = DATA / "dataset_info.json"
    info = json.loads(info_path.read_text()) if info_path.is_file() else {}
    info["mllm_audio_demo"] = ENTRY
    info_path.write_text(json.dumps(info, indent=2) + "\n")
    return names


def feature_summary(features) -> dict:
    import numpy as np

    arr = features.float().numpy().astype(np.float32)
    return {"shape": list(arr.shape), "sum": float(arr.astype(np.float64).sum()),
            "digest": hashlib.sha256(np.round(arr, 4).tobytes()).hexdigest()[:16],
            "strided": [round(float(x), 6) for x in arr.reshape(-1)[::FEATURE_STRIDE]]}


def resampled(names: list[str]) -> dict:
    """torchaudio's load, downmix and resample to 16 kHz, as LLaMA-Factory's _regularize_audios."""
    import torchaudio

    out = {}
    for name in names:
        audio, rate = torchaudio.load(str(DATA / name))
        if rate == 16000:
            continue
        if audio.shape[0] > 1:
            audio = audio.mean(dim=0, keepdim=True)
        wave = torchaudio.functional.resample(audio, rate, 16000).squeeze(0).double()
        out[Path(name).name] = {"rate": rate, "length": int(wave.numel()), "sum": float(wave.sum()),
                                "strided": [round(float(x), 8) for x in wave[::SAMPLE_STRIDE]]}
    return out


def main_audio(lf_data: Path) -> None:
    import transformers
    from make_reference import alone, lf_collator

    from llamafactory.data import get_dataset, get_template_and_fix_tokenizer
    from llamafactory.hparams import get_train_args
    from llamafactory.model import load_tokenizer

    sys.path.insert(0, str(ROOT / "tests"))
    from alm_models import audio_dir

    names = write_audio_data(lf_data)
    tmp = Path(tempfile.mkdtemp())
    try:
        model_dir = audio_dir(tmp / "models")
        model = transformers.Qwen2AudioForConditionalGeneration.from_pretrained(str(model_dir))
        args = dict(model_name_or_path=str(model_dir), stage="sft", do_train=True, finetuning_type="lora",
                    dataset="mllm_audio_demo", dataset_dir=str(DATA), cutoff_len=1024, template="qwen2_audio",
                    output_dir=str(tmp / "o"), overwrite_cache=True, report_to="none", cache_dir=str(tmp / "cache"))
        model_args, data_args, training_args, _ft, _gen = get_train_args(args)
        module = load_tokenizer(model_args)
        assert module["processor"] is not None, "transformers built no Qwen2AudioProcessor"
        template = get_template_and_fix_tokenizer(module["tokenizer"], data_args)
        ds = get_dataset(template, model_args, data_args, training_args, stage="sft", **module)["train_dataset"]
        collator = lf_collator(template, model, module)
        examples = []
        for row in ds:
            ids, labels, feature = alone(row)
            batch = collator([feature])
            mask = batch["feature_attention_mask"]
            assert all(row_mask[:int(row_mask.sum())].all() for row_mask in mask)
            examples.append({"audios": [Path(p).name for p in row["audios"]], "input_ids": ids, "labels": labels,
                             "feature_attention_mask": [int(n) for n in mask.sum(-1).tolist()],
                             "feature_attention_mask_width": int(mask.shape[-1]),
                             "input_features": feature_summary(batch["input_features"])})
            print([len(ids)], examples[-1]["feature_attention_mask"], file=sys.stderr)
        tokenizer = module["tokenizer"]
        out = {"transformers": transformers.__version__, "dataset": "mllm_audio_demo", "template": "qwen2_audio",
               "cutoff_len": 1024, "vocab": len(tokenizer), "audio_sampling_rate": 16000, "examples": examples,
               "feature_stride": FEATURE_STRIDE, "sample_stride": SAMPLE_STRIDE, "resampled": resampled(names)}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    (HERE / "reference_audio.json").write_text(json.dumps(out, separators=(",", ":")) + "\n")
