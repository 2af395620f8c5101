"""The training loop for real (through the launcher): single and DDP (2 gloo processes), full
and LoRA, bf16 and fp32; fp16 with its gradient scaler."""

import json

import pytest
import torch

from ftui.rundir.events import validate_event
from ftui.rundir.follower import summarize_run
from tests.conftest import lora_config, steps_of, tiny_config, train_sync

# The whole matrix runs with -m slow (CI time): in the default suite DDP LoRA under bf16
# autocast trains, engages and loads with peft in test_engines.py (conftest.engine_runs), fp32
# DDP full fine-tuning in test_ddp_gradients_are_normalised_by_the_tokens_of_all_ranks, single
# full in test_engines.py, and single LoRA in test_lf_methods.py, test_stage_pt.py and
# test_stage_preference.py.
MATRIX = [
    pytest.param(engine, method, precision, id=f"{engine}-{method}-{precision}", marks=pytest.mark.slow)
    for engine in ("single", "ddp")
    for method in ("full", "lora")
    for precision in ("bf16", "fp32")
]


def check_final_loads(run_dir, method, base=None):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    final = run_dir / "final"
    AutoTokenizer.from_pretrained(final)
    if method == "full":
        model = AutoModelForCausalLM.from_pretrained(final)
    else:
        from peft import AutoPeftModelForCausalLM

        cfg = json.loads((final / "adapter_config.json").read_text())
        assert cfg["base_model_name_or_path"] == str(base)
        model = AutoPeftModelForCausalLM.from_pretrained(final)
    out = model(input_ids=torch.tensor([[3, 4, 5]])).logits
    assert torch.isfinite(out).all()


@pytest.mark.dist
@pytest.mark.parametrize("engine,method,precision", MATRIX)
def test_engine_method_precision_trains(tmp_path, pretrained_base, engine, method, precision):
    nproc = 2 if engine == "ddp" else 1
    over = dict(engine=engine, nproc_per_node=nproc, bf16=precision == "bf16")
    cfg = lora_config(tmp_path, pretrained_base, **over) if method == "lora" else tiny_config(tmp_path, **over)
    run_dir, events, proc = train_sync(cfg)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert all(validate_event(e) == [] for e in events)
    events = [e for e in events if e["event"] != "prepare"]  # data preparation progress comes first
    kinds = [e["event"] for e in events]
    assert kinds[0] == "run_start" and kinds[-1] == "run_end" and events[-1]["status"] == "completed"
    start = events[0]
    assert (start["engine"], start["method"], start["precision"], start["world_size"]) == (engine, method, precision, nproc)
    steps = steps_of(events)
    assert [s["step"] for s in steps] == list(range(1, start["max_steps"] + 1))
    losses = [s["loss"] for s in steps]
    first, last = sum(losses[:3]) / 3, sum(losses[-3:]) / 3
    assert last < 0.8 * first, losses
    for s in steps:
        assert 0 < s["trainable_tokens"] < s["tokens"] <= start["planned_tokens_per_step"]
        assert len(s["mem"]) == nproc and all(m["peak"] > 0 for m in s["mem"])
        assert s["tokens_per_s"] > 0 and s["grad_norm"] is not None
    ranks = steps[0]["ranks"]
    assert len(ranks) == nproc
    for r in ranks:  # single and DDP: every rank holds every parameter and all optimizer state
        assert r["param_elements"] == start["total_params"]
        # AdamW: two fp32 moments per trainable element (plus a scalar step count per tensor)
        assert 8 * start["trainable_params"] <= r["optimizer_bytes"] <= 8 * start["trainable_params"] + 4096
    if method == "lora":
        assert start["trainable_params"] < start["total_params"] / 5
    check_final_loads(run_dir, method, pretrained_base)
    assert summarize_run(run_dir).status == "completed"


@pytest.mark.dist
def test_ddp_gradients_are_normalised_by_the_tokens_of_all_ranks(tmp_path):
    """2 DDP ranks x micro batch 2 see the same 4 examples per step as 1 rank x micro batch 2
    x accumulation 2 (same permutation, same seed, same initial weights). Their examples have
    different token counts, so loss and gradient agree only if every micro batch's summed
    loss is divided by the step's global token count (not averaged per rank or per batch)."""
    _, ev_a, pa = train_sync(tiny_config(tmp_path / "a", engine="ddp", nproc_per_node=2, per_device_train_batch_size=2, max_steps=3))
    _, ev_b, pb = train_sync(tiny_config(tmp_path / "b", engine="single", per_device_train_batch_size=2, gradient_accumulation_steps=2, max_steps=3))
    assert pa.returncode == 0 and pb.returncode == 0, pa.stderr[-2000:] + pb.stderr[-2000:]
    for sa, sb in zip(steps_of(ev_a), steps_of(ev_b)):
        assert sa["tokens"] == sb["tokens"] and sa["trainable_tokens"] == sb["trainable_tokens"]
        assert sa["loss"] == pytest.approx(sb["loss"], rel=1e-4)
        assert sa["grad_norm"] == pytest.approx(sb["grad_norm"], rel=1e-3)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU: fp16 runs are refused on the CPU at validation")
def test_fp16_reports_the_loss_scale(tmp_path):
    run_dir, events, proc = train_sync(tiny_config(tmp_path, fp16=True, max_steps=8, device="cuda"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    steps = steps_of(events)
    assert next(e for e in events if e["event"] == "run_start")["precision"] == "fp16"
    assert all(isinstance(s["loss_scale"], float) and s["loss_scale"] > 0 for s in steps)


def test_fp16_scaler_skips_a_step_with_an_inf_gradient():
    from ftui.runner.engines import DistInfo, make_engine

    # The engine's scaler logic, on CPU tensors: a config built past validation (which
    # refuses fp16 runs without a GPU).
    cfg = tiny_config(__import__("pathlib").Path("/tmp")).model_copy(update={"fp16": True})
    torch.manual_seed(0)  # inputs that do not overflow at the initial scale (others may skip the first step)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 1))
    engine = make_engine(cfg, DistInfo(), torch.device("cpu"))
    engine.prepare(model)

    def backward(poison: bool):
        with engine.autocast():
            loss = model(torch.randn(4, 8)).float().pow(2).mean()
        engine.backward(loss)
        if poison:
            model[0].weight.grad[0, 0] = float("inf")

    backward(poison=False)
    ok = engine.step()
    assert not ok.skipped and ok.loss_scale == 65536.0
    before = [p.detach().clone() for p in model.parameters()]
    backward(poison=True)
    bad = engine.step()
    assert bad.skipped and bad.loss_scale == ok.loss_scale / 2
    assert not torch.isfinite(bad.grad_norm)
    for p, q in zip(model.parameters(), before):
        assert torch.equal(p, q)  # the weights were not touched
    assert all(p.grad is None for p in model.parameters())
    backward(poison=False)
    assert not engine.step().skipped


@pytest.mark.slow
def test_torch_compile_trains_the_same_curve(tmp_path):
    """torch.compile of each layer (inductor, CPU here) gives the eager loss curve."""
    _, eager, _ = train_sync(tiny_config(tmp_path / "eager", max_steps=6))
    run_dir, compiled, proc = train_sync(tiny_config(tmp_path / "compiled", max_steps=6, torch_compile=True), timeout=900)
    assert summarize_run(run_dir).status == "completed", proc.stderr[-3000:]
    a, b = [s["loss"] for s in steps_of(eager)], [s["loss"] for s in steps_of(compiled)]
    assert len(a) == len(b) == 6
    assert all(abs(x - y) <= 1e-3 * abs(x) for x, y in zip(a, b)), (a, b)
