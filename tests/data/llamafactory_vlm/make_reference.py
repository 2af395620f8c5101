"""Regenerates reference.json: what LLaMA-Factory 0.9.5's own supervised preprocessing and
collator make of its ``mllm_demo`` dataset (the 6 records and 3 images, copied to data/) for
the tiny Qwen2-VL, Qwen2.5-VL, Qwen3-VL, LLaVA-1.5, Gemma 3 and InternVL models of
tests/vlm_models.py. Runs once, in a
LLaMA-Factory venv with the transformers the tests use (5.24.0), never ftui's;
tests/test_vl_encode.py reads the stored reference.json and needs no LLaMA-Factory.

    cp -a /work/lfvenv /work/lfvenv-vl
    /work/lfvenv-vl/bin/python -m pip install transformers==5.24.0 pillow==13.0.0   # ftui's versions
    DISABLE_VERSION_CHECK=1 /work/lfvenv-vl/bin/python tests/data/llamafactory_vlm/make_reference.py [LF_DATA_DIR] [--only F1,F2]
    DISABLE_VERSION_CHECK=1 /work/lfvenv-vl/bin/python tests/data/llamafactory_vlm/make_reference.py --dpo
    DISABLE_VERSION_CHECK=1 /work/lfvenv-vl/bin/python tests/data/llamafactory_vlm/make_reference.py --packed

    /work/lfvenv-tv/bin/python ... make_reference.py --video    # torch 2.14.1 + torchvision 0.29.1 + av

``--video`` regenerates only reference_video.json (below), in a venv with torchvision (LF's
video path needs transformers' video processors: ``pip install torch==2.14.1 torchvision==0.29.1``
then ``pip install llamafactory==0.9.5`` then ``pip install transformers==5.24.0 av==18.1.0
pillow==13.0.0``: the frames' pixels depend on PyAV's FFmpeg), where
LF's load_tokenizer builds the real Processor and no patch is needed.

``--only``: runs those families alone and puts their cases into the stored reference.json in
place of any earlier ones (a family added; the other cases are kept as they were made).
``--dpo`` regenerates only reference_dpo.json (the pairs of ``stage: dpo`` and the tagged
answers of ``stage: kto``, below) and leaves reference.json as it is. ``--packed`` regenerates only reference_packed.json
(packing and neat_packing, packed_reference.py). ``--audio`` regenerates
only reference_audio.json (Qwen2-Audio on mllm_audio_demo: make_reference_audio.py, which says
what its venv needs).

For each family and case (cutoff_len, image_max_pixels) it runs LLaMA-Factory's
``get_template_and_fix_tokenizer`` and ``get_dataset`` (stage sft, template qwen2_vl or
qwen3_vl_nothink), then its ``SFTDataCollatorWith4DAttentionMask`` with the model on each
example alone, for the pixel tensors and the M-RoPE position ids (the model's get_rope_index).

One patch, needed on a machine without torchvision: transformers 5.24 cannot build a Qwen2-VL
*Processor* there (its video-processor lookup imports torchvision), so LLaMA-Factory's
``load_tokenizer`` returns no processor. The script then gives it the smallest container its
qwen2_vl / qwen3_vl plugins read: the tokenizer, ``AutoImageProcessor.from_pretrained`` (the
PIL implementation, Qwen2VLImageProcessorPil, the one ftui uses), that same image processor as
``video_processor`` (read only for its ``merge_size`` and to be present: no video is encoded),
and the multimodal settings LLaMA-Factory's ``patch_processor`` sets on a real processor.
LLaVA's and Gemma 3's Processors need no torchvision: LLaMA-Factory builds them itself.
InternVL's does (a video processor), so it gets the same container, with the image_seq_length
of the folder's processor_config.json (what InternVLProcessor would read).

The dpo reference (reference_dpo.json): LLaMA-Factory's pairwise processor (``get_dataset``
with stage "rm", as its dpo workflow calls it) over data/mllm_dpo_demo.json, 4 preference
pairs in its rlhf_v layout over mllm_demo's images written for these tests (LLaMA-Factory's
demo data has no image pairs), then its ``PairwiseDataCollatorWithPadding`` on each pair
alone: the chosen row, then the rejected row, each with the record's images, padded to the
longer. Stored per pair: the batch's input_ids, attention_mask, labels, image_grid_thw,
position_ids (4 x 2 rows x width) and the pixel_values summary. Its ``kto`` cases: the
feedback processor (stage "kto") over data/mllm_kto_demo.json (4 answers tagged desirable or
not), then ``KTODataCollatorWithPadding`` on each example alone: input_ids, labels,
position_ids and pixel_values of the answer's row, and the mismatched row's kl_input_ids and
kl_labels (the previous record's answer after this record's prompt and images).

Stored per example: input_ids, labels, image_grid_thw and position_ids (4 rows: text, then
M-RoPE's temporal, height, width; None where the image tokens were cut, which the model cannot
run, or for a family without M-RoPE), token_type_ids (Gemma 3's; None elsewhere), and of
pixel_values the shape, a digest of its float32 bytes rounded to 4 decimals, its sum and its
first values.
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
ONLY = sys.argv[sys.argv.index("--only") + 1].split(",") if "--only" in sys.argv else None
ARGS = [a for a in sys.argv[1:] if a not in ("--only", "--dpo", "--packed", "--audio", "--video") and (ONLY is None or a != ",".join(ONLY))]
LF_DATA = Path(ARGS[0]) if ARGS else ROOT.parent / "shared" / "data" / "llamafactory"
DATA = HERE / "data"
# (cutoff_len, image_max_pixels): the default, one that cuts image tokens, one that shrinks the images.
CASES = [(1024, 768 * 768), (80, 768 * 768), (1024, 128 * 128)]
# (family, cutoff_len, image_max_pixels) of the dpo reference: the default, and small images
# with a cutoff_len that cuts the longer answers (the prompt keeps its image tokens).
DPO_CASES = [("qwen2_vl", 1024, 768 * 768), ("qwen3_vl", 1024, 768 * 768), ("qwen3_vl", 64, 128 * 128)]
KTO_CASES = [("qwen2_vl", 1024, 768 * 768), ("qwen3_vl", 1024, 128 * 128)]
KTO_ENTRY = {"file_name": "mllm_kto_demo.json", "formatting": "sharegpt",
             "columns": {"messages": "messages", "kto_tag": "label", "images": "images"},
             "tags": {"role_tag": "role", "content_tag": "content", "user_tag": "user", "assistant_tag": "assistant"}}
DPO_ENTRY = {"file_name": "mllm_dpo_demo.json", "ranking": True, "formatting": "sharegpt",
             "columns": {"messages": "conversations", "chosen": "chosen", "rejected": "rejected", "images": "images"}}
FIRST_VALUES = 8


def write_data() -> None:
    """The 6 mllm_demo records, their 3 images and their entries in dataset_info.json."""
    (DATA / "mllm_demo_data").mkdir(parents=True, exist_ok=True)
    records = json.loads((LF_DATA / "mllm_demo.json").read_text())
    for name in sorted({p for r in records for p in r["images"]}):
        shutil.copy(LF_DATA / name, DATA / name)
    (DATA / "mllm_demo.json").write_text(json.dumps(records, ensure_ascii=False, indent=1) + "\n")
    entry = json.loads((LF_DATA / "dataset_info.json").read_text())["mllm_demo"]
    info_path = DATA / "dataset_info.json"  # other entries kept (make_reference_audio.py adds mllm_audio_demo)
    info = json.loads(info_path.read_text()) if info_path.is_file() else {}
    info.update({"mllm_demo": entry, "mllm_dpo_demo": DPO_ENTRY, "mllm_kto_demo": KTO_ENTRY})
    info_path.write_text(json.dumps(info, indent=2) + "\n")


def pixel_summary(pixels) -> dict:
    import numpy as np

    arr = pixels.float().numpy().astype(np.float32)
    return {"shape": list(arr.shape), "sum": float(arr.astype(np.float64).sum()),
            "digest": hashlib.sha256(np.round(arr, 4).tobytes()).hexdigest()[:16],
            "first": [float(x) for x in arr.reshape(-1)[:FIRST_VALUES]]}


def _as_list(value):
    if value is None:
        return None
    value = value.tolist() if hasattr(value, "tolist") else value
    return value[0] if value and isinstance(value[0], list) else value


class NoTorchvisionProcessor:
    """transformers' AutoProcessor, whose "requires torchvision" ValueError (InternVL's video
    processor) becomes the error LLaMA-Factory's load_tokenizer takes for "no processor" (it
    retries a ValueError once and lets the second one through)."""

    @staticmethod
    def from_pretrained(*args, **kwargs):
        from transformers import AutoProcessor

        try:
            return AutoProcessor.from_pretrained(*args, **kwargs)
        except ValueError as err:
            if "torchvision" in str(err):
                raise RuntimeError(str(err)) from None
            raise


class ImageOnlyProcessor:
    """What LLaMA-Factory's qwen2_vl / qwen3_vl plugins read of a processor (see the module doc)."""

    def __init__(self, tokenizer, image_processor, model_dir: Path):
        self.tokenizer = tokenizer
        self.image_processor = image_processor
        self.video_processor = image_processor
        self.model_input_names = ["input_ids", "attention_mask", "pixel_values", "image_grid_thw"]
        numbers = model_dir / "processor_config.json"
        if numbers.is_file():  # InternVL: image_seq_length
            self.image_seq_length = json.loads(numbers.read_text())["image_seq_length"]


def lf_collator(template_obj, model, module: dict, **keys):
    """LF's supervised collator as its trainer builds it, on the CPU in float32 with SDPA (no
    block-diagonal mask unless ``keys`` ask for one): every reference below collates with it."""
    import torch

    from llamafactory.data import SFTDataCollatorWith4DAttentionMask
    from llamafactory.extras.constants import IGNORE_INDEX

    keys = {"block_diag_attn": False, **keys}
    return SFTDataCollatorWith4DAttentionMask(template=template_obj, model=model, label_pad_token_id=IGNORE_INDEX,
                                              attn_implementation="sdpa", compute_dtype=torch.float32, **module, **keys)


def alone(row) -> tuple[list[int], list[int], dict]:
    """An encoded example's ids, labels and the feature LF's collator takes for it alone in a
    batch (ftui's parity tests compare each example alone)."""
    ids, labels = list(row["input_ids"]), list(row["labels"])
    return ids, labels, {"input_ids": ids, "attention_mask": [1] * len(ids), "labels": labels,
                         "images": row["images"], "videos": row["videos"], "audios": row["audios"]}


def on_tiny_models(cases: list[tuple], run) -> list[dict]:
    """``run(family, model_dir, model, *rest, tmp)`` for each case (family, *rest) on its tiny
    model (tests/vlm_models.py), in a temporary folder removed afterwards."""
    import transformers

    sys.path.insert(0, str(ROOT / "tests"))
    from vlm_models import vlm_dir

    out = []
    tmp = Path(tempfile.mkdtemp())
    try:
        for family, *rest in cases:
            model_dir = vlm_dir(family, tmp / "models")
            model = transformers.AutoModelForImageTextToText.from_pretrained(str(model_dir))
            out.append(run(family, model_dir, model, *rest, tmp))
            print(family, *rest, file=sys.stderr)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def llamafactory_module(model_dir: Path, args: dict):
    """LLaMA-Factory's parsed arguments and tokenizer module for ``args``, with the processor
    the module doc describes where transformers builds none."""
    from transformers import AutoImageProcessor

    from llamafactory.hparams import get_train_args
    from llamafactory.model import load_tokenizer
    from llamafactory.model.patcher import patch_processor

    model_args, data_args, training_args, _ft, _gen = get_train_args(args)
    module = load_tokenizer(model_args)
    if module["processor"] is None:  # no torchvision: the patch the module doc describes
        processor = ImageOnlyProcessor(module["tokenizer"], AutoImageProcessor.from_pretrained(str(model_dir)), model_dir)
        patch_processor(processor, module["tokenizer"], model_args)
        module["processor"] = processor
    return model_args, data_args, training_args, module


def run_dpo_case(family: str, model_dir: Path, model, cutoff: int, max_pixels: int, tmp: Path) -> dict:
    """LLaMA-Factory's pairs of data/mllm_dpo_demo.json, each collated alone (module doc)."""
    from llamafactory.data import PairwiseDataCollatorWithPadding, get_dataset, get_template_and_fix_tokenizer
    from llamafactory.extras.constants import IGNORE_INDEX

    sys.path.insert(0, str(ROOT / "tests"))
    from vlm_models import FAMILIES

    template = FAMILIES[family]["template"]
    args = dict(
        model_name_or_path=str(model_dir), stage="dpo", do_train=True, finetuning_type="lora", dataset="mllm_dpo_demo",
        dataset_dir=str(DATA), cutoff_len=cutoff, template=template, image_max_pixels=max_pixels,
        output_dir=str(tmp / "o"), overwrite_cache=True, report_to="none", cache_dir=str(tmp / "cache"),
    )
    model_args, data_args, training_args, module = llamafactory_module(model_dir, args)
    template_obj = get_template_and_fix_tokenizer(module["tokenizer"], data_args)
    ds = get_dataset(template_obj, model_args, data_args, training_args, stage="rm", **module)["train_dataset"]
    collator = PairwiseDataCollatorWithPadding(template=template_obj, model=model, label_pad_token_id=IGNORE_INDEX, **module)
    pairs = []
    for row in ds:
        batch = collator([dict(row)])
        pairs.append({
            "images": [Path(p).name for p in row["images"]],
            "input_ids": batch["input_ids"].tolist(), "attention_mask": batch["attention_mask"].tolist(),
            "labels": batch["labels"].tolist(), "image_grid_thw": batch["image_grid_thw"].tolist(),
            "position_ids": batch["position_ids"].tolist(), "pixel_values": pixel_summary(batch["pixel_values"]),
        })
    tokenizer = module["tokenizer"]
    return {"family": family, "template": template, "cutoff_len": cutoff, "image_max_pixels": max_pixels,
            "vocab": len(tokenizer), "pad": tokenizer.pad_token_id, "pairs": pairs}


def run_kto_case(family: str, model_dir: Path, model, cutoff: int, max_pixels: int, tmp: Path) -> dict:
    """LLaMA-Factory's tagged answers of data/mllm_kto_demo.json, each collated alone (module doc)."""
    from llamafactory.data import KTODataCollatorWithPadding, get_dataset, get_template_and_fix_tokenizer
    from llamafactory.extras.constants import IGNORE_INDEX

    sys.path.insert(0, str(ROOT / "tests"))
    from vlm_models import FAMILIES

    template = FAMILIES[family]["template"]
    args = dict(
        model_name_or_path=str(model_dir), stage="kto", do_train=True, finetuning_type="lora", dataset="mllm_kto_demo",
        dataset_dir=str(DATA), cutoff_len=cutoff, template=template, image_max_pixels=max_pixels,
        output_dir=str(tmp / "o"), overwrite_cache=True, report_to="none", cache_dir=str(tmp / "cache"),
    )
    model_args, data_args, training_args, module = llamafactory_module(model_dir, args)
    template_obj = get_template_and_fix_tokenizer(module["tokenizer"], data_args)
    ds = get_dataset(template_obj, model_args, data_args, training_args, stage="kto", **module)["train_dataset"]
    collator = KTODataCollatorWithPadding(template=template_obj, model=model, label_pad_token_id=IGNORE_INDEX, **module)
    examples = []
    for row in ds:
        batch = collator([dict(row)])
        examples.append({
            "images": [Path(p).name for p in row["images"]], "kto_tag": bool(row["kto_tags"]),
            "input_ids": batch["input_ids"][0].tolist(), "labels": batch["labels"][0].tolist(),
            "kl_input_ids": batch["kl_input_ids"][0].tolist(), "kl_labels": batch["kl_labels"][0].tolist(),
            "image_grid_thw": batch["image_grid_thw"].tolist(), "position_ids": batch["position_ids"][:, 0, :].tolist(),
            "pixel_values": pixel_summary(batch["pixel_values"]),
        })
    return {"family": family, "template": template, "cutoff_len": cutoff, "image_max_pixels": max_pixels, "examples": examples}


def run_case(family: str, model_dir: Path, model, cutoff: int, max_pixels: int, tmp: Path) -> dict:
    from transformers import AutoImageProcessor

    from llamafactory.data import get_dataset, get_template_and_fix_tokenizer
    from llamafactory.hparams import get_train_args
    from llamafactory.model import load_tokenizer
    from llamafactory.model.patcher import patch_processor

    sys.path.insert(0, str(ROOT / "tests"))
    from vlm_models import FAMILIES

    template = FAMILIES[family]["template"]
    args = dict(
        model_name_or_path=str(model_dir), stage="sft", do_train=True, finetuning_type="lora", dataset="mllm_demo",
        dataset_dir=str(DATA), cutoff_len=cutoff, template=template, image_max_pixels=max_pixels,
        output_dir=str(tmp / "o"), overwrite_cache=True, report_to="none", cache_dir=str(tmp / "cache"),
    )
    model_args, data_args, training_args, _ft, _gen = get_train_args(args)
    import llamafactory.model.loader as lf_loader

    lf_loader.AutoProcessor = NoTorchvisionProcessor
    module = load_tokenizer(model_args)
    tokenizer = module["tokenizer"]
    if module["processor"] is None:  # no torchvision: the patch the module doc describes
        processor = ImageOnlyProcessor(tokenizer, AutoImageProcessor.from_pretrained(str(model_dir)), model_dir)
        patch_processor(processor, tokenizer, model_args)
        module["processor"] = processor
    template_obj = get_template_and_fix_tokenizer(tokenizer, data_args)
    ds = get_dataset(template_obj, model_args, data_args, training_args, stage="sft", **module)["train_dataset"]
    collator = lf_collator(template_obj, model, module)
    examples = []
    for row in ds:
        ids, labels, feature = alone(row)
        try:
            batch = collator([feature])
            positions = batch["position_ids"][:, 0, :].tolist() if batch.get("position_ids") is not None else None
        except (ValueError, IndexError, RuntimeError) as err:  # image tokens cut: the model cannot run it
            print(family, cutoff, "collator refused:", type(err).__name__, str(err)[:120], file=sys.stderr)
            batch, positions = None, None
        if batch is None:
            mm = template_obj.mm_plugin.get_mm_inputs(row["images"], [], [], [len(row["images"])], [0], [0], [ids], module["processor"])
        else:
            mm = batch
        examples.append({
            "input_ids": ids, "labels": labels, "images": [Path(p).name for p in row["images"]],
            "image_grid_thw": mm["image_grid_thw"].tolist() if "image_grid_thw" in mm else None, "position_ids": positions,
            "token_type_ids": _as_list(mm.get("token_type_ids")),
            "pixel_values": pixel_summary(mm["pixel_values"]),
        })
    return {"family": family, "template": template, "cutoff_len": cutoff, "image_max_pixels": max_pixels,
            "vocab": len(tokenizer), "eos": tokenizer.eos_token, "examples": examples}


def main_dpo() -> None:
    import transformers

    sys.path.insert(0, str(ROOT / "tests"))
    from vlm_models import vlm_dir

    cases, kto = [], []
    tmp = Path(tempfile.mkdtemp())
    try:
        for family, cutoff, max_pixels in DPO_CASES:
            model_dir = vlm_dir(family, tmp / "models")
            model = transformers.AutoModelForImageTextToText.from_pretrained(str(model_dir))
            case = run_dpo_case(family, model_dir, model, cutoff, max_pixels, tmp)
            print(family, cutoff, max_pixels, [len(p["input_ids"][0]) for p in case["pairs"]], file=sys.stderr)
            cases.append(case)
        for family, cutoff, max_pixels in KTO_CASES:
            model_dir = vlm_dir(family, tmp / "models")
            model = transformers.AutoModelForImageTextToText.from_pretrained(str(model_dir))
            kto.append(run_kto_case(family, model_dir, model, cutoff, max_pixels, tmp))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    out = {"transformers": transformers.__version__, "dataset": "mllm_dpo_demo", "cases": cases,
           "kto_dataset": "mllm_kto_demo", "kto_cases": kto}
    (HERE / "reference_dpo.json").write_text(json.dumps(out, separators=(",", ":")) + "\n")


def main() -> None:
    import transformers

    sys.path.insert(0, str(ROOT / "tests"))
    from vlm_models import FAMILIES, vlm_dir

    write_data()
    cases = []
    if ONLY is not None:
        kept = json.loads((HERE / "reference.json").read_text())["cases"]
        cases = [case for case in kept if case["family"] not in ONLY]
    tmp = Path(tempfile.mkdtemp())
    try:
        for family in ONLY or FAMILIES:
            model_dir = vlm_dir(family, tmp / "models")
            model = transformers.AutoModelForImageTextToText.from_pretrained(str(model_dir))
            for cutoff, max_pixels in CASES:
                case = run_case(family, model_dir, model, cutoff, max_pixels, tmp)
                print(family, cutoff, max_pixels, [len(e["input_ids"]) for e in case["examples"]], file=sys.stderr)
                cases.append(case)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    out = {"transformers": transformers.__version__, "dataset": "mllm_demo", "cases": cases}
    (HERE / "reference.json").write_text(json.dumps(out, separators=(",", ":")) + "\n")


# The video reference: LF's supervised processor over its mllm_video_demo (3 records, read from
# LF_DATA: the videos are not copied) and its collator on each example alone, per family and
# video keys (None: LF's defaults, video_fps 2.0, video_maxlen 128, video_max_pixels 256 * 256,
# video_min_pixels 16 * 16). Stored per example: input_ids, labels, video_grid_thw,
# second_per_grid_ts (Qwen2.5-VL), position_ids (4 rows) and the pixel_values_videos summary.
VIDEO_CASES = [("qwen2_vl", None), ("qwen2_5_vl", None), ("qwen3_vl", None),
               ("qwen2_vl", {"video_fps": 1.0, "video_maxlen": 6, "video_max_pixels": 128 * 128, "video_min_pixels": 32 * 32}),
               ("qwen3_vl", {"video_fps": 0.5, "video_maxlen": 4, "video_max_pixels": 160 * 160})]


def run_video_case(family: str, model_dir: Path, model, keys: dict | None, tmp: Path) -> dict:
    from llamafactory.data import get_dataset, get_template_and_fix_tokenizer

    sys.path.insert(0, str(ROOT / "tests"))
    from vlm_models import FAMILIES

    template = FAMILIES[family]["template"]
    args = dict(
        model_name_or_path=str(model_dir), stage="sft", do_train=True, finetuning_type="lora", dataset="mllm_video_demo",
        dataset_dir=str(LF_DATA), cutoff_len=4096, template=template, output_dir=str(tmp / "o"), overwrite_cache=True,
        report_to="none", cache_dir=str(tmp / "cache"), **(keys or {}),
    )
    model_args, data_args, training_args, module = llamafactory_module(model_dir, args)
    assert not isinstance(module["processor"], ImageOnlyProcessor), "the video reference needs torchvision (module doc)"
    template_obj = get_template_and_fix_tokenizer(module["tokenizer"], data_args)
    ds = get_dataset(template_obj, model_args, data_args, training_args, stage="sft", **module)["train_dataset"]
    collator = lf_collator(template_obj, model, module)
    examples = []
    for row in ds:
        ids, labels, feature = alone(row)
        batch = collator([feature])
        seconds = batch.get("second_per_grid_ts")
        examples.append({
            "input_ids": ids, "labels": labels, "videos": [Path(p).name for p in row["videos"]],
            "video_grid_thw": batch["video_grid_thw"].tolist(),
            "second_per_grid_ts": None if seconds is None else [float(x) for x in (seconds.tolist() if hasattr(seconds, "tolist") else seconds)],
            "position_ids": batch["position_ids"][:, 0, :].tolist(),
            "pixel_values_videos": pixel_summary(batch["pixel_values_videos"]),
        })
    tokenizer = module["tokenizer"]
    return {"family": family, "template": template, "keys": keys or {}, "vocab": len(tokenizer), "examples": examples}


def main_video() -> None:
    import transformers

    cases = on_tiny_models(VIDEO_CASES, run_video_case)
    import av
    import PIL

    # the frames' RGB depends on the FFmpeg inside PyAV (its colour conversion), their resize on Pillow
    out = {"transformers": transformers.__version__, "av": av.__version__, "pillow": PIL.__version__,
           "dataset": "mllm_video_demo", "cases": cases}
    (HERE / "reference_video.json").write_text(json.dumps(out, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    if "--audio" in sys.argv[1:]:  # reference_audio.json alone: make_reference_audio.py
        from make_reference_audio import main_audio; main_audio(LF_DATA); sys.exit(0)  # noqa: E702
    if "--packed" in sys.argv[1:]:
        sys.path.insert(0, str(HERE))
        from packed_reference import main_packed

        main_packed()
    elif "--video" in sys.argv[1:]:
        main_video()
    else:
        main_dpo() if "--dpo" in sys.argv[1:] else main()
