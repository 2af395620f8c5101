"""Defects a first CUDA run would hit, shown on the CPU where they can be (issue: ready for
the first GPU). What only a GPU shows is checked by ``bench/gpu_check.py`` on one (see
bench/README.md); these tests pin the mechanisms: process-group backends, FSDP gradients
under accumulation and fp16 overflow agreement (2 gloo ranks), FLOP counts against
``torch.utils.flop_counter``, the MFU peak per matmul mode, the throughput window, the
QLoRA preparation and the launcher's torchrun flags."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from conftest import tiny_config
from ftui.config.load import demo_config
from ftui.runner.distributed import backend_for, needs_process_group
from ftui.runner.engines import DistInfo, make_engine
from ftui.runner.metrics import Window, matmul_mode, peak_flops, set_matmul_precision
from ftui.runner.model import apply_method, backward_span, base_dtype, compute_dtype, flops_per_token


def tiny_llama(layers: int = 4, hidden: int = 64, vocab: int = 512, dtype=torch.float32):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=vocab, max_position_embeddings=256)
    cfg._attn_implementation = "eager"  # attention as plain matmuls, which the FLOP counter sees
    return LlamaForCausalLM(cfg).to(dtype)


def unchecked(**over):
    """A config past validation (fp16 is refused on a CPU machine; these tests exercise the
    GPU code path's logic on the CPU)."""
    return demo_config().model_copy(update=over)


# --- 1. fsdp_offload: gradient norm over CPU shards needs a CPU backend beside NCCL


def test_fsdp_offload_joins_a_group_with_a_cpu_backend_beside_nccl():
    cuda, cpu = torch.device("cuda", 0), torch.device("cpu")
    assert backend_for(unchecked(engine="fsdp_offload"), cuda) == "cuda:nccl,cpu:gloo"
    assert backend_for(unchecked(engine="fsdp"), cuda) == "nccl"
    assert backend_for(unchecked(engine="zero3_offload"), cuda) == "nccl"  # DeepSpeed reduces on the GPU
    assert backend_for(unchecked(engine="fsdp_offload"), cpu) == "gloo"


def test_one_process_engines_that_need_a_group_get_one_without_a_network_store():
    one = DistInfo()
    assert needs_process_group(unchecked(engine="fsdp_offload"), one)
    assert needs_process_group(unchecked(engine="zero3_offload"), one)
    assert not needs_process_group(unchecked(engine="single"), one)


# --- 2. sharding engines load on the CPU; DeepSpeed loads in the half type it computes in


def test_sharding_engines_build_the_model_on_the_cpu():
    cuda = torch.device("cuda", 0)
    assert make_engine(unchecked(engine="fsdp", nproc_per_node=2), DistInfo(), cuda).load_device().type == "cpu"
    assert make_engine(unchecked(engine="fsdp_offload"), DistInfo(), cuda).load_device().type == "cpu"
    assert make_engine(unchecked(engine="zero3_offload"), DistInfo(), cuda).load_device().type == "cpu"
    assert make_engine(unchecked(engine="zero2", nproc_per_node=2), DistInfo(), cuda).load_device() == cuda
    assert make_engine(unchecked(engine="single"), DistInfo(), cuda).load_device() == cuda
    assert base_dtype(unchecked(engine="zero3", nproc_per_node=2, bf16=True)) == torch.bfloat16
    assert base_dtype(unchecked(engine="fsdp", nproc_per_node=2, bf16=True)) == torch.float32  # fp32 master shards


# --- 3 and 12: FSDP2 on 2 gloo ranks


def _fsdp_rank(rank: int, world: int, store: str, cases: tuple[str, ...], out: str) -> None:
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world))
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    try:
        for case in cases:  # one pair of processes for every case (CI time: their start-up is most of the cost)
            Path(f"{out}.{case}.{rank}").write_text(_fsdp_case(rank, world, case))
    finally:
        dist.destroy_process_group()


def _fsdp_case(rank: int, world: int, case: str) -> str:
    """What one rank saw of ``case`` (a fresh model and engine for each)."""
    torch.manual_seed(0)
    model = tiny_llama(layers=2)
    precision = {"fp16": True} if case == "fp16" else {}
    cfg = unchecked(engine="fsdp", nproc_per_node=world, bf16=False, **precision)
    engine = make_engine(cfg, DistInfo.from_env(), torch.device("cpu"))
    engine.prepare(model)
    ids = torch.randint(0, 512, (2, 16), generator=torch.Generator().manual_seed(rank))
    lines = []
    if case == "accumulate":
        with engine.accumulating(last=False):
            loss = engine.model(input_ids=ids, labels=ids).loss
            engine.backward(loss)
        for name, p in engine.model.named_parameters():
            local = p.grad.to_local().numel() if p.grad is not None else -1
            lines.append(f"{name} {p.numel()} {local}")
    else:
        with engine.accumulating(last=True):
            loss = engine.model(input_ids=ids, labels=ids).loss
            engine.backward(loss)
        if rank == 1:  # an overflow in one rank's gradient shard only
            p = next(q for q in engine.model.parameters() if q.grad is not None and q.grad.to_local().numel())
            p.grad.to_local().view(-1)[0] = float("inf")
        before = [p.detach().to_local().clone() for p in engine.model.parameters()]
        outcome = engine.step()
        changed = any(not torch.equal(b, p.detach().to_local()) for b, p in zip(before, engine.model.parameters()))
        lines.append(f"skipped={outcome.skipped} changed={changed} scale={outcome.loss_scale}")
    return "\n".join(lines)


FSDP_CASES = ("accumulate", "fp16")


@pytest.fixture(scope="module")
def two_fsdp_ranks(tmp_path_factory) -> dict[str, list[str]]:
    """{case: [what rank 0 saw, what rank 1 saw]} of each FSDP_CASES, run by one pair of ranks."""
    tmp_path = tmp_path_factory.mktemp("fsdp")
    out = tmp_path / "out"
    mp.start_processes(_fsdp_rank, args=(2, str(tmp_path / "store"), FSDP_CASES, str(out)), nprocs=2, join=True, start_method="spawn")
    return {case: [Path(f"{out}.{case}.{r}").read_text() for r in range(2)] for case in FSDP_CASES}


@pytest.mark.dist
def test_fsdp_keeps_gradients_sharded_between_micro_batches(two_fsdp_ranks):
    """A micro batch before the last leaves each rank its 1/N shard of the gradients, not a
    full unsharded fp32 copy (FSDP2 with gradient sync off keeps those)."""
    for text in two_fsdp_ranks["accumulate"]:
        rows = [line.split() for line in text.splitlines()]
        assert rows
        for name, full, local in rows:
            assert int(local) >= 0, f"{name}: no sharded gradient after a non-last micro batch"
            assert int(local) <= (int(full) + 1) // 2, f"{name}: {local} of {full} elements held"


@pytest.mark.dist
def test_fsdp_fp16_overflow_on_one_rank_skips_the_step_on_every_rank(two_fsdp_ranks):
    results = two_fsdp_ranks["fp16"]
    for text in results:
        assert "skipped=True" in text and "changed=False" in text, results
    scales = {text.split("scale=")[1] for text in results}
    assert len(scales) == 1  # both ranks halved the same scale


# --- 5. tokens/s and MFU leave eval and checkpoint time out


def test_the_throughput_window_leaves_out_eval_and_checkpoint_time(monkeypatch):
    clock = [100.0]
    monkeypatch.setattr(time, "perf_counter", lambda: clock[0])
    window = Window(torch.device("cpu"))
    window.reset()  # starts on the patched clock
    clock[0] += 2.0  # training
    with window.excluded():
        clock[0] += 30.0  # eval + checkpoint
    clock[0] += 1.0  # training
    assert time.perf_counter() - window.started == pytest.approx(3.0)


# --- 6. MFU: FLOPs per token against torch's own counter


def counted_flops(model, ids) -> int:
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        model(input_ids=ids, labels=ids).loss.backward()
    return counter.get_total_flops()


@pytest.mark.parametrize("method", ["full", "freeze"])
def test_flops_per_token_matches_torchs_flop_counter(method):
    model = tiny_llama(layers=8, hidden=128, vocab=1024)
    if method == "freeze":
        model.requires_grad_(False)
        for layer in model.model.layers[-2:]:
            layer.requires_grad_(True)
    total = sum(p.numel() for p in model.parameters())
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    seq = 128
    ids = torch.randint(0, 1024, (2, seq))
    frozen_below, backward_layers = backward_span(model)
    estimate = flops_per_token(model.config, total, trainable, seq, frozen_below, backward_layers) * ids.numel()
    measured = counted_flops(model, ids)
    assert estimate / measured == pytest.approx(1.0, abs=0.06), (estimate, measured)


def test_packed_runs_average_sequence_length_over_training_examples_only(demo_tokenizer):
    from ftui.runner.stages import build_datasets

    cfg = demo_config(packing=True, val_size=0.25, max_samples=40)
    data = build_datasets(cfg, demo_tokenizer)
    assert data.eval
    assert data.train_examples == data.records - data.dropped - len(data.eval)
    assert len(data.train) < data.train_examples  # packed rows hold several examples


# --- 7. fp32 runs use TF32 and MFU is taken against the matching peak


def test_matmul_mode_and_its_peak(monkeypatch):
    assert matmul_mode("fp32", True, (9, 0)) == "tf32"
    assert matmul_mode("fp32", False, (9, 0)) == "fp32"
    assert matmul_mode("fp32", True, (7, 0)) == "fp32"  # Volta has no TF32
    assert matmul_mode("bf16", True, (9, 0)) == "bf16"
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *_: "NVIDIA H100 80GB HBM3")
    cuda = torch.device("cuda", 0)
    assert peak_flops(cuda, "bf16") == 989e12
    assert peak_flops(cuda, "tf32") == 989e12 / 2
    assert peak_flops(cuda, "fp32") == 67e12
    assert peak_flops(torch.device("cpu"), "bf16") is None


def test_tf32_is_switched_on_for_fp32_and_can_be_turned_off():
    saved = torch.backends.cuda.matmul.allow_tf32
    try:
        set_matmul_precision("tf32")
        assert torch.backends.cuda.matmul.allow_tf32
        set_matmul_precision("fp32")
        assert not torch.backends.cuda.matmul.allow_tf32
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved
    assert demo_config().tf32 is True
    assert demo_config(tf32=False).tf32 is False


# --- 9. QLoRA: no reentrant checkpointing, no fp32 upcast of the frozen base, fp32 computes in fp32


def test_qlora_preparation_keeps_the_base_dtype_and_non_reentrant_checkpointing():
    model = tiny_llama(dtype=torch.bfloat16)
    model.is_loaded_in_4bit = True  # what bitsandbytes marks; the weights here stay plain
    cfg = unchecked(finetuning_type="lora", quantization_bit=4, gradient_checkpointing=True, bf16=True, lora_target="all")
    peft_model = apply_method(model, cfg)
    base = peft_model.get_base_model()
    assert base.model.embed_tokens.weight.dtype == torch.bfloat16  # not upcast to fp32
    assert base.model.norm.weight.dtype == torch.bfloat16
    assert all(p.dtype == torch.float32 for p in peft_model.parameters() if p.requires_grad)  # adapters fp32
    func = base.model.layers[0]._gradient_checkpointing_func
    assert func.keywords.get("use_reentrant") is False
    assert compute_dtype(unchecked(finetuning_type="lora", quantization_bit=4)) == torch.float32


# --- the launcher works with the torchrun of the installed torch


def test_torchrun_gets_shutdown_timeout_only_when_it_knows_it(tmp_path, monkeypatch):
    import importlib.machinery

    from ftui.jobs import launch

    fake = tmp_path / "torch"
    (fake / "distributed").mkdir(parents=True)
    (fake / "distributed" / "run.py").write_text("parser.add_argument('--max-restarts')\n")
    spec = importlib.machinery.ModuleSpec("torch", None, is_package=True)
    spec.submodule_search_locations = [str(fake)]
    monkeypatch.setattr(launch.importlib.util, "find_spec", lambda name: spec)
    launch.torchrun_has_shutdown_timeout.cache_clear()
    try:
        two_nodes = tiny_config(tmp_path, engine="ddp", nnodes=2, rdzv_endpoint="127.0.0.1:29500")  # torchrun's case
        cmd = launch.launch_command(two_nodes, tmp_path / "run")
        assert "torch.distributed.run" in cmd
        assert not any(a.startswith("--shutdown-timeout") for a in cmd)
        (fake / "distributed" / "run.py").write_text("parser.add_argument('--shutdown-timeout')\n")
        launch.torchrun_has_shutdown_timeout.cache_clear()
        cmd = launch.launch_command(two_nodes, tmp_path / "run")
        assert "--shutdown-timeout=600" in cmd
    finally:
        launch.torchrun_has_shutdown_timeout.cache_clear()
