"""The "will it fit?" planner against hand-computed figures for Llama-2-7B.

Hand arithmetic used below (Llama-2-7B: vocab 32000, hidden 4096, intermediate 11008,
32 layers, 32 heads, untied embeddings):
  one layer = 4 x 4096^2 (attention) + 3 x 4096 x 11008 (MLP) + 2 x 4096 (norms) = 202,383,360
  P = 32 x 202,383,360 + 2 x 32000 x 4096 + 4096 = 6,738,415,616  (the published count)
  LoRA r=8 on all 7 linears: 32 x 8 x (4 x 8192 + 3 x 15104) = 19,988,480 trainable
Mixed precision with AdamW keeps 16 bytes per trainable parameter (fp32 weight, gradient,
two moments); ZeRO-3 keeps 2 + 2 + 12 = 16 bytes per parameter spread over the GPUs.
"""

import json
import subprocess
import sys

import pytest

from ftui.plan.model_shape import ModelShape, read_model_config
from ftui.plan.planner import CUDA_CONTEXT_BYTES, GIB, gib, NCCL_COMMUNICATOR_BYTES, NCCL_NVLS_BYTES, estimate, estimate_for
from ftui.plan.verdict import plan
from ftui.config.load import demo_config, parse_config

LLAMA2_7B = {"model_type": "llama", "vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 11008,
             "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32, "tie_word_embeddings": False}
P7 = 6_738_415_616


@pytest.fixture
def llama7b(tmp_path):
    d = tmp_path / "llama-2-7b"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(LLAMA2_7B))
    (d / "model.safetensors").write_bytes(b"")  # validation wants weights and a tokenizer; the planner reads config.json only
    (d / "tokenizer.json").write_text("{}")
    return d


def cfg_for(model_dir, **kw):
    data = dict(model_name_or_path=str(model_dir), dataset="x.json", bf16=True, cutoff_len=2048, per_device_train_batch_size=1)
    data.update(kw)
    cfg, _ = parse_config(data, "test")
    assert cfg is not None
    return cfg


def close(a, b, rel):
    return abs(a - b) <= rel * b


def test_parameter_counts_match_the_published_ones():
    shape = ModelShape.from_config(LLAMA2_7B)
    assert shape.params == P7
    qwen = ModelShape.from_config({"model_type": "qwen2", "vocab_size": 151936, "hidden_size": 896, "intermediate_size": 4864,
                                   "num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2,
                                   "tie_word_embeddings": True})
    assert close(qwen.params, 494_032_768, 0.001)  # Qwen2-0.5B, with q/k/v biases and tied embeddings


def test_full_finetuning_on_ddp_keeps_16_bytes_per_parameter_plus_the_autocast_copy():
    e = estimate(ModelShape.from_config(LLAMA2_7B), method="full", precision="bf16", engine="ddp", world_size=8)
    assert e.trainable == P7
    assert close(e.weights, 4 * P7 + 2 * P7, 0.01)  # fp32 master + bf16 copies autocast keeps for backward
    assert close(e.gradients, 4 * P7, 0.01)
    assert close(e.optimizer, 8 * P7, 0.01)


def test_zero3_on_8_gpus_spreads_the_16_bytes_per_parameter():
    shape = ModelShape.from_config(LLAMA2_7B)
    z3 = estimate(shape, method="full", precision="bf16", engine="zero3", world_size=8)
    states = z3.weights + z3.gradients + z3.optimizer
    assert close(states, 16 * P7 / 8, 0.08)  # 13.5 GB, plus a gathered layer and a bucket
    assert close(z3.optimizer, 12 * P7 / 8, 0.01)
    ddp = estimate(shape, method="full", precision="bf16", engine="ddp", world_size=8)
    assert ddp.weights + ddp.gradients + ddp.optimizer > 7 * states
    # Sharding states does not shard activations (DeepSpeed's module is bf16, so its residual
    # stream is too: a little less than autocast over fp32 weights).
    assert 0.7 * ddp.activations < z3.activations < ddp.activations


def test_lora_trains_twenty_million_parameters_over_a_bf16_base():
    shape = ModelShape.from_config(LLAMA2_7B)
    lora = estimate(shape, method="lora", precision="bf16", engine="single", lora_rank=8, lora_target="all")
    assert lora.trainable == 19_988_480
    assert close(lora.weights, 2 * P7, 0.02)  # the base in bf16, adapters in fp32
    assert close(lora.gradients + lora.optimizer, 12 * 19_988_480, 0.001)
    full = estimate(shape, method="full", precision="bf16", engine="single")
    assert full.total > 4 * lora.total
    qlora = estimate(shape, method="qlora", precision="bf16", engine="single")
    assert qlora.weights < 0.35 * lora.weights  # NF4 base: about half a byte per weight


def test_activations_scale_with_tokens_and_checkpointing_cuts_them():
    shape = ModelShape.from_config(LLAMA2_7B)
    a1 = estimate(shape, micro_batch=1, seq_len=2048, chunked_loss=False).activations
    a2 = estimate(shape, micro_batch=2, seq_len=2048, chunked_loss=False).activations
    assert close(a2, 2 * a1, 1e-9)
    ck = estimate(shape, micro_batch=1, seq_len=2048, gradient_checkpointing=True, chunked_loss=False).activations
    assert ck < a1 / 5
    # Korthikanti et al.: ~34 bytes x hidden per token per layer in 16-bit with flash attention;
    # ftui's autocast keeps the residual stream and norms in fp32, so somewhat more.
    per_token_layer = (a1 - 2048 * 32000 * 14) / (2048 * 33)
    assert 34 * 4096 <= per_token_layer <= 2 * 34 * 4096


def test_the_chunked_loss_holds_one_chunk_of_logits_not_the_whole_micro_batchs():
    qwen = ModelShape.from_config(dict(LLAMA2_7B, vocab_size=151936, hidden_size=64, intermediate_size=256,
                                       num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2))
    kw = dict(micro_batch=4, seq_len=1024, precision="fp32")
    full = estimate(qwen, chunked_loss=False, **kw).activations
    chunked = estimate(qwen, **kw).activations
    chunk_tokens = 2**26 // 151936
    # the whole micro batch's logits (in fp32: logits, log-softmax, its gradient) against one chunk's
    # (in fp32: the logits, turned into their gradient in place) and the flattened last hidden states
    assert full - chunked == 4096 * 151936 * 12 - (chunk_tokens * 151936 * 4 + 4096 * 64 * 4)
    assert chunked < 0.25 * full
    # Liger sizes its chunks from the hidden size: 4096 tokens / ceil(151936 / (8 x 64)) -> 16 tokens a chunk
    liger = estimate(qwen, liger=True, **kw).activations
    assert chunked - liger == (chunk_tokens - 16) * 151936 * 4
    # in half precision a chunk also holds its logits in the compute type while the fp32 copy is made
    half = dict(kw, precision="bf16")
    assert (estimate(qwen, **half).activations - estimate(qwen, liger=True, **half).activations
            == chunk_tokens * 151936 * 6 - 16 * 151936 * 2)


def test_verdicts_for_known_cases(llama7b):
    h100 = 80 * GIB
    full = plan(cfg_for(llama7b, finetuning_type="full", engine="single"), h100)
    assert full.fits is False
    assert full.suggestions and any("zero3_offload" in s or "lora" in s.lower() for s in full.suggestions)
    for s in full.suggestions:  # every suggestion really fits
        assert "GiB" in s
    z3 = plan(cfg_for(llama7b, finetuning_type="full", engine="zero3", nproc_per_node=8, gradient_checkpointing=True), h100)
    assert z3.fits is True and z3.suggestions == []
    lora = plan(cfg_for(llama7b, finetuning_type="lora", cutoff_len=512), 24 * GIB)
    assert lora.fits is True
    assert "fits" in lora.summary() and "NOT" not in lora.summary()


def test_a_config_that_cannot_fit_says_so_and_what_would(llama7b):
    cfg = cfg_for(llama7b, finetuning_type="full", engine="ddp", nproc_per_node=2, per_device_train_batch_size=8)
    v = plan(cfg, 80 * GIB)
    assert v.fits is False
    text = v.summary()
    assert "does NOT fit" in text and "try" in text
    fixed = [s for s in v.suggestions if s.startswith("engine") or "batch" in s or "lora" in s.lower()]
    assert fixed, v.suggestions
    tiny = plan(cfg, 1 * GIB)
    assert tiny.fits is False and tiny.suggestions == [] and "more or larger GPUs" in tiny.summary()


def test_user_deepspeed_file_sets_the_stage(llama7b, tmp_path):
    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps({"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}}, "bf16": {"enabled": True}}))
    e = estimate_for(cfg_for(llama7b, finetuning_type="full", engine="zero3", deepspeed=str(ds), nproc_per_node=8))
    assert e.optimizer == 0 and close(e.host_bytes, 12 * P7 / 8 + 2 * P7 / 8, 0.05)


def test_demo_and_hub_cache_configs_are_found(tmp_path, monkeypatch):
    assert read_model_config("ftui-demo")["hidden_size"] == 128
    snap = tmp_path / "hub" / "models--org--tiny" / "snapshots" / "abc"
    snap.mkdir(parents=True)
    (snap / "config.json").write_text(json.dumps(LLAMA2_7B))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    assert read_model_config("org/tiny")["num_hidden_layers"] == 32
    with pytest.raises(ValueError, match="no config.json"):
        read_model_config("org/absent")
    assert estimate_for(demo_config()).total > 0


def test_ftui_plan_cli(llama7b, tmp_path):
    conf = tmp_path / "c.yaml"
    (tmp_path / "x.json").write_text('[{"instruction": "q", "output": "a"}]')
    conf.write_text(f"model_name_or_path: {llama7b}\ndataset: {tmp_path / 'x.json'}\nfinetuning_type: full\nbf16: true\ncutoff_len: 2048\n")
    run = lambda *a: subprocess.run([sys.executable, "-m", "ftui.cli.main", "plan", *a], capture_output=True, text=True, timeout=60)  # noqa: E731
    no_fit = run(str(conf), "--gpu-memory", "80")
    assert no_fit.returncode == 1, no_fit.stderr
    assert "does not fit" in no_fit.stdout and "try" in no_fit.stdout and "optimizer" in no_fit.stdout
    fits = run(str(conf), "--gpu-memory", "80", "--set", "finetuning_type=lora")
    assert fits.returncode == 0 and "fits" in fits.stdout
    assert "CUDA context 0.8 GiB (assumed)" in fits.stdout  # one process: no NCCL
    missing = run(str(conf), "--set", "model_name_or_path=org/not-downloaded")
    assert missing.returncode == 2 and "no config.json" in missing.stderr
    # the datasets must be here, as for ftui train; with --gpu-memory (for another machine) they need not be
    no_data = run(str(conf), "--set", "dataset=no_such_dataset")
    assert no_data.returncode == 2 and "no_such_dataset" in no_data.stderr
    assert run(str(conf), "--set", "dataset=no_such_dataset", "--gpu-memory", "80", "--set", "finetuning_type=lora").returncode == 0


def test_peak_counts_gradients_and_activations_together_only_where_both_persist():
    shape = ModelShape.from_config(LLAMA2_7B)
    single = estimate(shape, method="full", precision="bf16", engine="single")
    assert single.total == single.weights + single.optimizer + max(single.gradients, single.activations)
    ddp = estimate(shape, method="full", precision="bf16", engine="ddp", world_size=2)  # buckets keep gradients
    assert ddp.total == ddp.weights + ddp.gradients + ddp.optimizer + ddp.activations
    z2 = estimate(shape, method="full", precision="bf16", engine="zero2", world_size=2)
    assert z2.total == z2.weights + z2.gradients + z2.optimizer + z2.activations


def test_nccl_buffers_grow_the_overhead_with_processes_communicators_and_nvls(monkeypatch):
    monkeypatch.delenv("NCCL_NVLS_ENABLE", raising=False)
    shape = ModelShape.from_config(LLAMA2_7B)
    over = lambda **kw: estimate(shape, method="lora", **kw).overhead.total  # noqa: E731
    one = over(engine="single")
    assert one == CUDA_CONTEXT_BYTES  # one process: no NCCL communicator
    ddp = over(engine="ddp", world_size=2)
    assert ddp == one + NCCL_COMMUNICATOR_BYTES
    assert over(engine="fsdp", world_size=8, compute_major=8) == ddp  # A100: no NVLS
    assert over(engine="zero2", world_size=2) == one + 2 * NCCL_COMMUNICATOR_BYTES  # DeepSpeed clones the world group
    assert over(engine="ddp", world_size=2, compute_major=9) == ddp  # NVLS needs 3 or more GPUs of a node
    assert over(engine="ddp", world_size=8, compute_major=9) == ddp + NCCL_NVLS_BYTES  # 8x H100
    assert over(engine="ddp", world_size=8, nproc_per_node=2, compute_major=9) == ddp  # 4 nodes of 2
    monkeypatch.setenv("NCCL_NVLS_ENABLE", "0")
    assert over(engine="ddp", world_size=8, compute_major=9) == ddp  # NVLS turned off
    monkeypatch.delenv("NCCL_NVLS_ENABLE")
    e1 = estimate(shape, method="lora", engine="ddp", world_size=2)
    e8 = estimate(shape, method="lora", engine="ddp", world_size=8, compute_major=9)
    assert e8.total == e1.total and e8.needed - e1.needed == NCCL_NVLS_BYTES


def test_the_verdict_states_what_it_assumed_for_the_context_and_nccl(llama7b, monkeypatch):
    monkeypatch.delenv("NCCL_NVLS_ENABLE", raising=False)
    cfg = cfg_for(llama7b, finetuning_type="lora", cutoff_len=512, engine="ddp", nproc_per_node=8)
    h100 = plan(cfg, 80 * GIB, compute_major=9)
    a100 = plan(cfg, 80 * GIB, compute_major=8)
    assert h100.estimate.needed - a100.estimate.needed == NCCL_NVLS_BYTES
    _split, result = h100.short()
    assert "incl. CUDA context + NCCL 3.8 GiB, assumed" in result  # the form's line
    assert "CUDA context 0.8 GiB + NCCL buffers incl. NVLS 3.0 GiB (assumed)" in h100.summary()
    single = plan(cfg_for(llama7b, finetuning_type="lora", cutoff_len=512), 80 * GIB)
    assert "incl. CUDA context 0.8 GiB, assumed" in single.short()[1] and "NCCL" not in single.summary()


def test_ftui_plan_reads_the_gpu_generation_from_nvml_and_says_what_it_assumed(llama7b, tmp_path, monkeypatch, capsys):
    from ftui.cli.main import main
    from tests.fake_nvml import FakeGpu, use_fake_nvml

    use_fake_nvml(monkeypatch, [FakeGpu(name="NVIDIA H100 80GB HBM3", uuid=f"GPU-{i}", capability=(9, 0)) for i in range(8)])
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("NCCL_NVLS_ENABLE", raising=False)
    conf = tmp_path / "c.yaml"
    (tmp_path / "x.json").write_text('[{"instruction": "q", "output": "a"}]')
    conf.write_text(f"model_name_or_path: {llama7b}\ndataset: {tmp_path / 'x.json'}\nfinetuning_type: lora\nbf16: true\n"
                    "engine: zero2\nnproc_per_node: 8\ncutoff_len: 512\n")
    assert main(["plan", str(conf)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "CUDA context 0.8 GiB + NCCL buffers incl. NVLS 2 x 3.0 GiB (assumed)" in out
    assert "fits 80.0 GiB GPUs" in out
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")  # two processes: no NVLS
    assert main(["plan", str(conf), "--set", "nproc_per_node=2"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "NCCL buffers 2 x 0.8 GiB (assumed)" in out and "NVLS" not in out


QWEN15 = dict(LLAMA2_7B, vocab_size=151936, hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
              num_attention_heads=12, num_key_value_heads=2)


def test_compile_and_liger_count_the_fused_mlp_activation_once():
    qwen15 = ModelShape.from_config(QWEN15)
    kw = dict(micro_batch=4, seq_len=2048, precision="bf16")
    plain = estimate(qwen15, **kw).activations
    fused = estimate(qwen15, fused_kernels=True, **kw).activations
    # compiled, the SwiGLU's activation and product are not saved: 2 x intermediate x 2 bytes per
    # token and layer (the layers and the +1 for the gradient flowing back through one)
    assert plain - fused == 4 * 2048 * 2 * 8960 * 2 * 29
    # Liger's SwiGLU kernel keeps its inputs and the down projection keeps its output: one
    # intermediate-sized tensor fewer (against Liger's loss alone, which changes the logits term)
    liger_loss = estimate(qwen15, liger=True, **kw).activations
    assert liger_loss - estimate(qwen15, liger=True, fused_kernels=True, **kw).activations == 4 * 2048 * 8960 * 2 * 29


def test_pure_bf16_counts_the_fp32_copy_transformers_rmsnorm_keeps():
    """transformers' RMSNorm upcasts a bf16 input to fp32 and keeps that copy for backward (two
    norms a layer); Liger's norm does not. Under autocast over fp32 weights (full fine-tuning)
    the norms' inputs are fp32 anyway; LoRA's bf16 base has the copy with or without pure_bf16."""
    qwen15 = ModelShape.from_config(QWEN15)
    kw = dict(micro_batch=4, seq_len=2048, precision="bf16")
    tokens_layers = 4 * 2048 * 29
    for liger, norm_copies in ((False, 2 * 1536 * 4), (True, 0)):
        mixed = estimate(qwen15, liger=liger, fused_kernels=liger, **kw).activations
        pure = estimate(qwen15, liger=liger, fused_kernels=liger, pure_bf16=True, **kw).activations
        # the residual stream's 6 saved hidden-sized tensors in bf16 instead of fp32, less the norms' fp32 copies
        assert mixed - pure == tokens_layers * (6 * 1536 * 2 - norm_copies)
        lora = [estimate(qwen15, method="lora", liger=liger, fused_kernels=liger, pure_bf16=p, **kw).activations
                for p in (False, True)]
        assert lora[0] == lora[1]


def test_the_config_turns_on_the_fused_kernels_estimate(llama7b):
    plain = estimate_for(cfg_for(llama7b)).activations
    assert estimate_for(cfg_for(llama7b, torch_compile=True)).activations < plain


def test_the_planner_compares_with_the_gpus_the_run_picked(llama7b, monkeypatch):
    """Issue 13, item 13: gpus picks the GPUs; the verdict is against the smallest of those
    (and their generation), not the machine's first ones."""
    from tests.fake_nvml import FakeGpu, use_fake_nvml

    use_fake_nvml(monkeypatch, [FakeGpu(name="NVIDIA A10", uuid="GPU-a", capability=(8, 6), mem_total=24 * GIB),
                                FakeGpu(name="NVIDIA H100", uuid="GPU-b", capability=(9, 0), mem_total=80 * GIB)])
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert plan(cfg_for(llama7b, finetuning_type="lora")).gpu_bytes == 24 * GIB
    assert plan(cfg_for(llama7b, finetuning_type="lora", gpus="1")).gpu_bytes == 80 * GIB


def test_preference_stages_count_their_reference_copy_their_rows_and_their_logits():
    shape = ModelShape.from_config(LLAMA2_7B)
    common = dict(method="full", precision="bf16", engine="fsdp", world_size=4, micro_batch=1, seq_len=2048)
    sft = estimate(shape, **common)
    dpo = estimate(shape, training_stage="dpo", **common)
    # a frozen fp32 reference, sharded over the 4 ranks as the policy is
    assert dpo.weights - sft.weights == pytest.approx(shape.params * 4 / 4)
    assert any("reference copy" in n for n in dpo.notes)
    # twice the rows, the answers' log-probabilities one chunk of logits at a time as the loss
    # is taken; full logits (chunked_loss off) cost more than the rows alone
    full_logits = estimate(shape, training_stage="dpo", chunked_loss=False, **common)
    assert sft.activations < dpo.activations < 2 * sft.activations < full_logits.activations
    assert estimate(shape, training_stage="dpo", pref_loss="simpo", **common).weights == sft.weights  # reference-free
    lora = dict(common, method="lora")
    assert estimate(shape, training_stage="kto", **lora).weights == estimate(shape, **lora).weights  # the adapter off
    rm = estimate(shape, training_stage="rm", **common)
    assert rm.weights == sft.weights and rm.activations < dpo.activations  # no logits, only one value a position


def test_ftui_plan_for_gpus_elsewhere_does_not_ask_this_machine(llama7b, tmp_path, monkeypatch, capsys):
    """From a login node without GPUs: fp16, device cuda and QLoRA are refused for a run here,
    but `ftui plan --gpu-memory` plans for GPUs elsewhere and takes them."""
    from ftui.cli.main import main
    from tests.fake_nvml import use_fake_nvml

    use_fake_nvml(monkeypatch, [])
    conf = tmp_path / "c.yaml"
    conf.write_text(f"model_name_or_path: {llama7b}\ndataset: x.json\nfinetuning_type: lora\nfp16: true\ndevice: cuda\n"
                    "gpus: '0,1'\nnproc_per_node: 2\nengine: ddp\ncutoff_len: 512\n")
    assert main(["plan", str(conf)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "no CUDA GPU was found" in err
    assert main(["plan", str(conf), "--gpu-memory", "80"]) == 0
    assert "fits 80.0 GiB GPUs" in " ".join(capsys.readouterr().out.split())
    assert main(["plan", str(conf), "--gpu-memory", "80", "--set", "quantization_bit=4"]) in (0, 1)  # a verdict, not a refusal


def test_a_cpu_runs_plan_is_host_memory_without_gpu_overheads(capsys):
    """device: cpu (the demo): no CUDA context or NCCL rows, no 'no GPU seen' advice; with
    --gpu-memory the user asks about a GPU, and gets the GPU's view."""
    from ftui.cli.main import main

    assert main(["plan", "--preset", "demo"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "per process (host memory)" in out and "CUDA context" not in out and "no GPU seen" not in out
    assert "a CPU run (device: cpu)" in out
    assert main(["plan", "--preset", "demo", "--gpu-memory", "24"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "per GPU" in out and "CUDA context" in out and "fits 24.0 GiB GPUs" in out


def test_attention_kernels_change_what_a_layer_keeps():
    """fa2 (torch's varlen FlashAttention-2) keeps neither K/V repeated to every query head nor
    the float bias SDPA makes from a packed or padded batch's mask; eager attention
    (flash_attn: disabled) keeps each layer's softmax, heads x cutoff_len values a token, fp32
    and (in half precision) its cast."""
    qwen15 = ModelShape.from_config(QWEN15)  # 12 query heads of 128, 2 K/V heads
    tokens_layers = 4 * 2048 * 29
    for precision, act in (("bf16", 2), ("fp32", 4)):
        kw = dict(micro_batch=4, seq_len=2048, precision=precision)
        sdpa = estimate(qwen15, **kw).activations
        assert estimate(qwen15, attention="sdpa", **kw).activations == sdpa
        # the repeated K/V less the grouped ones (2 x (1536 - 256)) and the mask's bias (2,048 a token)
        assert sdpa - estimate(qwen15, attention="fa2", **kw).activations == tokens_layers * (2 * 1280 + 2048) * act
        softmax = 4 + (2 if precision == "bf16" else 0)
        assert estimate(qwen15, attention="eager", **kw).activations - sdpa == tokens_layers * 12 * 2048 * softmax
    kw = dict(micro_batch=4, seq_len=2048, precision="bf16")
    # multi-head attention: repeat_kv copies nothing, fa2 saves the bias alone
    mha = ModelShape.from_config(dict(QWEN15, num_key_value_heads=12))
    assert estimate(mha, **kw).activations - estimate(mha, attention="fa2", **kw).activations == tokens_layers * 2048 * 2
    # one unpacked row has no mask: SDPA takes grouped heads as they are and makes no bias
    one = dict(kw, micro_batch=1, packing=False)
    assert estimate(qwen15, attention="fa2", **one).activations == estimate(qwen15, **one).activations
    assert estimate(qwen15, attention="fa2", **dict(one, micro_batch=2)).activations < estimate(qwen15, **dict(one, micro_batch=2)).activations
    # a dpo pair is two rows even at micro batch 1; pt's blocks of running text carry no mask
    dpo = dict(one, training_stage="dpo")
    assert estimate(qwen15, attention="fa2", **dpo).activations < estimate(qwen15, **dpo).activations
    pt = dict(kw, training_stage="pt", packing=True)
    assert estimate(qwen15, attention="fa2", **pt).activations == estimate(qwen15, **pt).activations


def test_the_config_picks_the_attention_estimate_and_eager_runs_are_offered_sdpa(llama7b):
    from ftui.config.schema import RunConfig

    base = dict(model_name_or_path=str(llama7b), dataset="x.json", bf16=True, cutoff_len=2048, per_device_train_batch_size=1,
                finetuning_type="lora")
    shape = ModelShape.from_config(LLAMA2_7B)
    by_key = {key: estimate_for(RunConfig(**base, flash_attn=key), shape).activations for key in ("auto", "sdpa", "fa2", "disabled")}
    assert by_key["auto"] == by_key["sdpa"] == by_key["fa2"]  # one unpacked row: no mask, nothing for fa2 to save
    packed = {key: estimate_for(RunConfig(**base, flash_attn=key, packing=True), shape).activations for key in ("auto", "fa2")}
    assert packed["auto"] > packed["fa2"]
    # 32 heads x 2,048 x 6 bytes a token and layer (32 layers and the one the gradient flows
    # back through): 24.75 GiB more for one row of 2,048
    assert by_key["disabled"] - by_key["sdpa"] == 2048 * 33 * 32 * 2048 * 6
    lora = dict(finetuning_type="lora")
    sdpa = plan(cfg_for(llama7b, **lora), 40 * GIB)
    assert sdpa.fits is True
    eager = plan(cfg_for(llama7b, flash_attn="disabled", **lora), 40 * GIB)
    assert eager.fits is False
    # the same result, no slower: offered before gradient checkpointing, which costs the same
    assert eager.suggestions[0] == f"flash_attn: auto (~{gib(sdpa.estimate.total)})", eager.suggestions
    assert any(s.startswith("gradient_checkpointing") for s in eager.suggestions)
    # a run on SDPA is never told to change its attention
    tight = plan(cfg_for(llama7b, **lora), 16 * GIB)
    assert tight.fits is False and tight.suggestions and not any("flash_attn" in s for s in tight.suggestions)


def test_auto_attention_is_eager_for_a_model_sdpa_cannot_compute(tmp_path):
    """Gemma 2 soft-caps its attention logits: flash_attn auto loads it with eager attention
    (transformers' choice), so the plan counts eager's softmax and never offers auto as a fix."""
    gemma2 = dict(LLAMA2_7B, model_type="gemma2")
    d = tmp_path / "gemma2"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(gemma2))
    (d / "model.safetensors").write_bytes(b"")
    (d / "tokenizer.json").write_text("{}")
    shape = ModelShape.from_config(gemma2)
    assert shape.sdpa is False and ModelShape.from_config(LLAMA2_7B).sdpa is True
    auto, eager = (estimate_for(cfg_for(d, finetuning_type="lora", flash_attn=k), shape).activations for k in ("auto", "disabled"))
    assert auto == eager
    verdict = plan(cfg_for(d, finetuning_type="lora", flash_attn="disabled"), 40 * GIB)
    assert verdict.fits is False and verdict.suggestions and not any("flash_attn" in s for s in verdict.suggestions)
