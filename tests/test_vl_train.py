"""Training a tiny Qwen2-VL with images: the engines on 2 gloo ranks (DDP, FSDP2 with the vision
tower's blocks as its own units), and `ftui train` end to end on LLaMA-Factory's mllm_demo.

The engine tests drive the runner's own parts (load_model, apply_method, the stage's collation
with images, the chunked loss, Engine.prepare / backward / step) with examples made from the
tiny model's image processor (tests/vl_examples.py), so they need nothing of the encoding side.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from tests.vl_examples import ImageExamples, tiny_vlm_cfg

# (engine, method, freeze_vision_tower) for each case one pair of ranks runs; "fsdp-bf16": FSDP's bf16 MixedPrecisionPolicy
CASES = (("ddp", "full", True), ("fsdp", "full", True), ("fsdp", "full", False), ("fsdp", "lora", True), ("zero3", "full", False),
         ("fsdp-bf16", "full", False))


def _rank(rank: int, world: int, store: str, root: str, out: str) -> None:
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    try:
        for engine, method, frozen in CASES:
            result = _case(rank, world, Path(root), engine, method, frozen)
            Path(f"{out}.{engine}-{method}-{frozen}.{rank}").write_text(json.dumps(result))
    finally:
        dist.destroy_process_group()


def _full(p: torch.Tensor) -> torch.Tensor:
    """The whole parameter: FSDP2's DTensor gathered, or ZeRO-3's partitions."""
    if hasattr(p, "ds_id"):
        import deepspeed

        with deepspeed.zero.GatheredParameters([p]):
            return p.detach().clone()
    return (p.full_tensor() if hasattr(p, "full_tensor") else p).detach().clone()


def _local(p: torch.Tensor) -> tuple[int, int]:
    """(elements this rank holds, elements of the whole parameter)."""
    if hasattr(p, "ds_id"):
        return p.ds_tensor.numel(), p.ds_numel
    return (p.to_local().numel() if hasattr(p, "to_local") else p.numel()), p.numel()


def _case(rank: int, world: int, root: Path, engine_name: str, method: str, frozen: bool) -> dict:
    """Two optimizer steps of one case; what this rank saw."""
    from torch.distributed.fsdp import FSDPModule

    from ftui.runner.data import Collator
    from ftui.runner.engines import DistInfo, make_engine
    from ftui.runner.loss import install_chunked_loss, micro_batch_loss
    from ftui.runner.media_batch import media_collation
    from ftui.runner.model import apply_method, decoder_layers, load_model
    from ftui.runner.vlm import vision_blocks

    cfg = tiny_vlm_cfg("qwen2_vl", root, engine=engine_name.removesuffix("-bf16"), nproc_per_node=world, finetuning_type=method,
                       freeze_vision_tower=frozen, learning_rate=1e-2, lora_target="all", bf16=engine_name.endswith("-bf16"))
    engine = make_engine(cfg, DistInfo.from_env(), torch.device("cpu"))
    torch.manual_seed(0)
    model = apply_method(load_model(cfg, engine.load_device()), cfg)
    head = install_chunked_loss(model)
    collator = Collator(0, loss_positions=True, media=media_collation(model))
    vision_before = {n: p.detach().clone() for n, p in model.named_parameters() if n.startswith(("model.visual.", "base_model.model.model.visual."))}
    lm_before = {n: p.detach().clone() for n, p in model.named_parameters() if ".language_model." in n and p.requires_grad}
    engine.prepare(model)
    base = engine.unwrap()
    blocks, layers = vision_blocks(base), decoder_layers(base)
    units = {"vision": [isinstance(b, FSDPModule) for b in blocks], "language": [isinstance(layer, FSDPModule) for layer in layers]}
    shares = [_local(p) for p in blocks.parameters()]  # (held, whole) of every vision block parameter
    make = ImageExamples(Path(cfg.model_name_or_path))
    colours = [(40 * rank + 20 * k, 200 - 30 * k, 90) for k in range(4)]
    examples = [make.example(f"picture {k} of rank {rank}", f" colour {k}", [(56 + 28 * (k % 2), 56)], colour=c)
                for k, c in enumerate(colours)]
    losses = []
    for step in range(2):
        batch = collator(examples[2 * step: 2 * step + 2])
        with engine.accumulating(last=True):
            total = micro_batch_loss(engine.model, head, batch.model_inputs(), batch.labels, engine.autocast,
                                     positions=batch.loss_positions)
            engine.backward(total * engine.dp_size / batch.loss_tokens / world)
        engine.step()
        losses.append(total.item() / batch.loss_tokens)
    after = dict(engine.unwrap().named_parameters())
    vision_changed = any(not torch.equal(_full(after[n]), v) for n, v in vision_before.items())
    lm_changed = any(not torch.equal(_full(after[n]), v) for n, v in lm_before.items())
    return {"losses": losses, "units": units, "shares": shares, "vision_changed": vision_changed, "lm_changed": lm_changed,
            "vision_params": len(vision_before)}


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory) -> dict[tuple, list[dict]]:
    from tests.vlm_models import vlm_dir

    root = tmp_path_factory.mktemp("vl-engines")
    vlm_dir("qwen2_vl", root)  # built once, before the ranks read it
    out = root / "out"
    mp.start_processes(_rank, args=(2, str(root / "store"), str(root), str(out)), nprocs=2, join=True, start_method="spawn")
    return {case: [json.loads(Path(f"{out}.{'-'.join(map(str, case))}.{r}").read_text()) for r in range(2)] for case in CASES}


@pytest.mark.dist
def test_ddp_trains_a_tiny_qwen2_vl_with_its_vision_tower_frozen(two_ranks):
    for seen in two_ranks[("ddp", "full", True)]:
        assert all(torch.isfinite(torch.tensor(loss)) for loss in seen["losses"]), seen
        assert seen["vision_params"] > 0 and not seen["vision_changed"] and seen["lm_changed"]


@pytest.mark.dist
def test_fsdp_shards_the_vision_tower_block_by_block_like_the_decoder_layers(two_ranks):
    for case in (("fsdp", "full", True), ("fsdp", "full", False), ("fsdp", "lora", True), ("fsdp-bf16", "full", False)):
        for seen in two_ranks[case]:
            assert seen["units"]["vision"] == [True, True] and seen["units"]["language"] == [True, True], (case, seen)
            assert seen["shares"] and all(local <= (full + 1) // 2 for local, full in seen["shares"]), seen["shares"]
            assert sum(local for local, _ in seen["shares"]) < sum(full for _, full in seen["shares"])
            assert all(torch.isfinite(torch.tensor(loss)) for loss in seen["losses"])
            assert seen["lm_changed"]
    frozen, unfrozen = two_ranks[("fsdp", "full", True)], two_ranks[("fsdp", "full", False)]
    assert not any(seen["vision_changed"] for seen in frozen)
    assert all(seen["vision_changed"] for seen in unfrozen + two_ranks[("fsdp-bf16", "full", False)])
    assert not any(seen["vision_changed"] for seen in two_ranks[("fsdp", "lora", True)])


@pytest.mark.dist
def test_zero3_partitions_the_vision_tower_and_trains_it_when_unfrozen(two_ranks):
    for seen in two_ranks[("zero3", "full", False)]:
        assert seen["shares"] and all(local <= (full + 1) // 2 for local, full in seen["shares"]), seen["shares"]
        assert all(torch.isfinite(torch.tensor(loss)) for loss in seen["losses"])
        assert seen["vision_changed"] and seen["lm_changed"]


# --- `ftui train` end to end on mllm_demo


@pytest.mark.slow
@pytest.mark.parametrize("method,frozen,engine", [("full", True, "single"), ("full", False, "single"), ("lora", True, "single"),
                                                  ("freeze", True, "single"), ("full", True, "ddp"), ("full", False, "fsdp"),
                                                  ("full", False, "zero3")])
def test_ftui_train_on_mllm_demo_trains_a_tiny_qwen2_vl(method, frozen, engine, tmp_path, lf_data):
    from safetensors.torch import load_file

    from tests.conftest import train_sync
    from tests.vlm_models import vlm_dir

    from ftui.config.load import demo_config

    model = vlm_dir("qwen2_vl", tmp_path / "models")
    cfg = demo_config(model_name_or_path=str(model), model_init="pretrained", stage="sft", template="qwen2_vl",
                      dataset="mllm_demo", dataset_dir=str(lf_data), finetuning_type=method, freeze_vision_tower=frozen,
                      freeze_trainable_layers=1, max_steps=2, per_device_train_batch_size=2, learning_rate=1e-2,
                      image_max_pixels=128 * 128, cutoff_len=512, engine=engine, nproc_per_node=1 if engine == "single" else 2,
                      output_dir=str(tmp_path / "runs"), logging_steps=1, run_name=f"vl-{method}-{engine}")
    run_dir, events, proc = train_sync(cfg)
    assert proc.returncode == 0, (run_dir / "train.log").read_text()[-4000:]
    start = next(e for e in events if e["event"] == "run_start")
    assert start["padding_free"] is False and "M-RoPE" in start["padding_free_why"]
    steps = [e for e in events if e["event"] == "step"]
    assert len(steps) == 2 and all(torch.isfinite(torch.tensor(e["loss"])) for e in steps)
    saved = run_dir / "final" / "preprocessor_config.json"  # chat, predict and export read images with it
    assert saved.read_bytes() == (model / "preprocessor_config.json").read_bytes()
    if method == "lora":
        return
    before = load_file(str(model / "model.safetensors"))
    after = load_file(str(run_dir / "final" / "model.safetensors"))
    def changed(part: str) -> bool:  # the saved names are transformers' checkpoint names ("visual.blocks.0...")
        keys = [k for k in before if part in k]
        assert keys, part
        return any(not torch.equal(before[k], after[k]) for k in keys)

    assert changed("visual.blocks.") is (not frozen)
    assert not changed("visual.merger.")  # the projector stays frozen (freeze_multi_modal_projector)
    assert changed("layers.1.")


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["single", "fsdp"])
def test_a_vl_run_resumed_from_its_checkpoint_continues_with_the_same_losses(engine, tmp_path, lf_data):
    from tests.conftest import resume_sync, train_sync
    from tests.vlm_models import vlm_dir

    from ftui.config.load import demo_config

    model = vlm_dir("qwen2_vl", tmp_path / "models")
    cfg = demo_config(model_name_or_path=str(model), model_init="pretrained", stage="sft", template="qwen2_vl",
                      dataset="mllm_demo", dataset_dir=str(lf_data), finetuning_type="lora", freeze_vision_tower=False,
                      max_steps=4, save_steps=2, per_device_train_batch_size=1, learning_rate=1e-2, image_max_pixels=128 * 128,
                      cutoff_len=512, lr_scheduler_type="constant", warmup_ratio=0.0, engine=engine,
                      nproc_per_node=1 if engine == "single" else 2, output_dir=str(tmp_path / "runs"), logging_steps=1,
                      run_name=f"vl-resume-{engine}")
    run_dir, events, proc = train_sync(cfg)
    assert proc.returncode == 0, (run_dir / "train.log").read_text()[-4000:]
    losses = [e["loss"] for e in events if e["event"] == "step"]
    resumed, proc = resume_sync(run_dir, run_dir / "checkpoints" / "step-2")
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert [e["loss"] for e in resumed if e["event"] == "step"] == pytest.approx(losses[2:], rel=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("family,engine", [("qwen2_5_vl", "single"), ("qwen3_vl", "single"), ("qwen3_vl", "fsdp")])
def test_ftui_train_on_mllm_demo_trains_the_other_qwen_vl_families(family, engine, tmp_path, lf_data):
    from tests.conftest import train_sync
    from tests.vlm_models import FAMILIES, vlm_dir

    from ftui.config.load import demo_config

    model = vlm_dir(family, tmp_path / "models")
    cfg = demo_config(model_name_or_path=str(model), model_init="pretrained", stage="sft", template=FAMILIES[family]["template"],
                      dataset="mllm_demo", dataset_dir=str(lf_data), finetuning_type="full", freeze_vision_tower=False, max_steps=2,
                      per_device_train_batch_size=1, learning_rate=1e-2, image_max_pixels=128 * 128, cutoff_len=512, engine=engine,
                      nproc_per_node=1 if engine == "single" else 2, output_dir=str(tmp_path / "runs"), logging_steps=1,
                      run_name=f"{family}-{engine}")
    run_dir, events, proc = train_sync(cfg)
    assert proc.returncode == 0, (run_dir / "train.log").read_text()[-4000:]
    steps = [e for e in events if e["event"] == "step"]
    assert len(steps) == 2 and all(torch.isfinite(torch.tensor(e["loss"])) for e in steps)
