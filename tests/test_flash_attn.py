"""flash_attn: fa2 (ftui.runner.attention): FlashAttention-2 over each example alone, with the
sequences' lengths counted by the collator instead of a mask.

The kernel itself (torch's varlen_attn) needs a CUDA GPU; here it is replaced by a reference
that runs causal SDPA over each sequence the cumulative lengths name, so what these tests
check is everything around it: the lengths the collator counts (packed examples, padding),
their slicing for a preference stage's rows, the layouts and dtypes handed to the kernel,
grouped K/V heads, the adaptation to each torch's varlen_attn signature, the fallbacks to
SDPA, and that the model, the loss, its gradients and the DPO / KTO stages come out as with
SDPA and its mask. Validation refuses fa2 where it cannot run and fa3 by name."""

from __future__ import annotations

import contextlib
import json
import random

import pytest
import torch
import torch.nn.functional as F

from ftui.config.load import demo_config, load_config
from ftui.config.model_checks import read_model
from ftui.config.preflight import config_problems
from ftui.config.problems import FieldProblem
from ftui.machine.facts import MachineFacts, for_another_machine
from ftui.runner import attention as A
from ftui.runner.data import IGNORE, Collator, Example, pack_examples, row_sequence_lengths
from ftui.runner.loss import token_loss_sum
from tests.tolerances import LOGP_SUM_FLOOR, close

VOCAB = 512


def reference_kernel(calls: list):
    """What varlen_attn computes: causal attention within each sequence of the flattened batch
    (with ``window``: over the last ``window`` positions, transformers' sliding window)."""

    def kernel(q, k, v, cu, max_len, scale, window=None):
        calls.append(dict(q=q.shape, k=k.shape, dtype=q.dtype, cu=cu.tolist(), max_len=max_len, window=window))
        bounds = cu.tolist()
        assert bounds[0] == 0 and bounds[-1] == q.size(0) and max_len >= max(b - a for a, b in zip(bounds, bounds[1:]))
        pieces = []
        for a, b in zip(bounds, bounds[1:]):
            i = torch.arange(b - a)
            allowed = (i[None, :] <= i[:, None]) & ((i[None, :] > i[:, None] - window) if window else True)
            pieces.append(F.scaled_dot_product_attention(*(t[a:b].transpose(0, 1)[None] for t in (q, k, v)), attn_mask=allowed,
                                                         scale=scale, enable_gqa=True)[0].transpose(0, 1))
        return torch.cat(pieces)

    return kernel


@pytest.fixture
def kernel_calls(monkeypatch):
    calls: list = []
    monkeypatch.setattr(A, "_KERNEL", [reference_kernel(calls)])
    monkeypatch.setattr(A, "FLASH_DTYPES", A.FLASH_DTYPES + (torch.float32,))  # fp32 here: exact comparisons
    return calls


def tiny_qwen2(implementation: str, layers: int = 2):
    """A Qwen2 (q/k/v biases, 4 query heads over 2 K/V heads) with the same weights for every implementation."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    if implementation == A.IMPLEMENTATION:
        A.register()
    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=layers, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=256)
    return Qwen2ForCausalLM._from_config(cfg, attn_implementation=implementation)


def examples(n: int, seed: int = 0, longest: int = 40) -> list[Example]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        length = rng.randint(3, longest)
        ids = [rng.randrange(1, VOCAB) for _ in range(length)]
        prompt = rng.randint(1, length - 1)
        out.append(Example(ids, [IGNORE] * prompt + ids[prompt:], real_tokens=length))
    return out


def loss_and_grads(model, inputs, labels):
    model.zero_grad()
    logits = model(**inputs, use_cache=False).logits
    loss = token_loss_sum(logits, labels)
    loss.backward()
    return logits.detach(), loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}


# --- the lengths


def test_row_sequence_lengths_are_each_packed_example_then_the_padding():
    packed = Example([1] * 9, [1] * 9, position_ids=[0, 1, 2, 0, 1, 0, 1, 2, 3])
    assert row_sequence_lengths(packed, 9) == [3, 2, 4]
    assert row_sequence_lengths(packed, 16) == [3, 2, 4, 7]  # the padding: one more, attended by nothing else
    assert row_sequence_lengths(Example([1] * 5, [1] * 5), 8) == [5, 3]
    assert row_sequence_lengths(Example([1] * 8, [1] * 8), 8) == [8]


def test_the_collator_counts_cumulative_lengths_and_slices_them_for_rows():
    rows = [Example([1] * 6, [1] * 6, position_ids=[0, 1, 2, 3, 0, 1]), Example([1] * 3, [1] * 3, position_ids=[0, 1, 2]),
            Example([1] * 8, [1] * 8, position_ids=list(range(8)))]
    batch = Collator(0, pad_to_multiple=8, sequence_lengths=True)(rows)
    assert batch.cu_seqlens.dtype == torch.int32
    assert batch.cu_seqlens.tolist() == [0, 4, 6, 8, 11, 16, 24]  # row 0: 4, 2, pad 2; row 1: 3, pad 5; row 2: 8
    assert batch.row_sequences == [3, 2, 1] and batch.max_seqlen == 8
    inputs = batch.model_inputs()
    assert inputs["cu_seq_lens_q"] is inputs["cu_seq_lens_k"] is batch.cu_seqlens and inputs["max_length_q"] == 8
    tail = batch.model_inputs(slice(1, 3))
    assert tail["cu_seq_lens_q"].tolist() == [0, 3, 8, 16] and tail["input_ids"].shape == (2, 8)
    assert batch.model_inputs(slice(0, 1))["cu_seq_lens_q"].tolist() == [0, 4, 6, 8]
    plain = Collator(0, pad_to_multiple=8)(rows)  # sdpa: no lengths, the model's inputs as before
    assert plain.cu_seqlens is None and set(plain.model_inputs()) == {"input_ids", "position_ids"}


# --- the model and its loss


@pytest.mark.parametrize("packing", [True, False])
def test_fa2_gives_sdpa_s_logits_loss_and_gradients(kernel_calls, packing):
    data = examples(12, seed=1)
    rows = pack_examples(data, 64) if packing else data[:4]
    sdpa, fa2 = tiny_qwen2("sdpa"), tiny_qwen2(A.IMPLEMENTATION)
    plain = Collator(0, pad_to_multiple=8)(rows)
    counted = Collator(0, pad_to_multiple=8, sequence_lengths=True)(rows)
    ref = loss_and_grads(sdpa, plain.model_inputs(), plain.labels)
    got = loss_and_grads(fa2, counted.model_inputs(), counted.labels)
    assert len(kernel_calls) == 2  # one call a layer: the kernel engaged, nothing fell back
    call = kernel_calls[0]
    tokens = counted.input_ids.numel()
    assert call["q"] == (tokens, 4, 16) and call["k"] == (tokens, 2, 16)  # grouped K/V heads as they are
    bounds = counted.cu_seqlens.tolist()
    assert call["cu"] == bounds and call["max_len"] == counted.max_seqlen == max(b - a for a, b in zip(bounds, bounds[1:]))
    real = plain.attention_mask.bool() if plain.attention_mask is not None else torch.ones_like(plain.input_ids, dtype=torch.bool)
    assert close(got[0][real], ref[0][real], 1e-5)  # padding's outputs differ (it attends to itself) and carry no label
    assert got[1].item() == pytest.approx(ref[1].item(), rel=1e-5)  # a sum over hundreds of tokens: ulps of each
    for name, grad in ref[2].items():
        assert close(got[2][name], grad, 1e-5), name


def test_fa2_under_autocast_hands_the_kernel_the_autocast_type(monkeypatch):
    calls: list = []
    monkeypatch.setattr(A, "_KERNEL", [reference_kernel(calls)])
    monkeypatch.setattr(A, "FALLBACKS", set())
    rows = pack_examples(examples(8, seed=2), 64)
    counted = Collator(0, pad_to_multiple=8, sequence_lengths=True)(rows)
    plain = Collator(0, pad_to_multiple=8)(rows)
    sdpa, fa2 = tiny_qwen2("sdpa"), tiny_qwen2(A.IMPLEMENTATION)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = fa2(**counted.model_inputs(), use_cache=False).logits
        ref = sdpa(**plain.model_inputs(), use_cache=False).logits
    assert calls and all(c["dtype"] == torch.bfloat16 for c in calls)  # fp32 weights, the kernel gets bf16 (as SDPA would)
    assert close(got, ref, 2e-2)
    calls.clear()
    fa2(**counted.model_inputs(), use_cache=False)  # fp32 without autocast: FlashAttention cannot, SDPA runs
    assert calls == [] and A.FALLBACKS == {"attention outside fp16/bf16"}


def test_sliding_window_layers_give_sdpa_s_sliding_window(kernel_calls):
    """Qwen2 with its sliding window (and Mistral, Phi-3, Gemma 3's sliding layers): the kernel's
    window is transformers' (the window's last positions, this one included)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    models = {}
    for implementation in ("sdpa", A.IMPLEMENTATION):
        torch.manual_seed(0)
        cfg = Qwen2Config(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                          num_key_value_heads=2, use_sliding_window=True, sliding_window=5, max_window_layers=1)
        models[implementation] = Qwen2ForCausalLM._from_config(cfg, attn_implementation=implementation)
    rows = pack_examples(examples(8, seed=9), 64)
    plain, counted = Collator(0, pad_to_multiple=8)(rows), Collator(0, pad_to_multiple=8, sequence_lengths=True)(rows)
    ref = loss_and_grads(models["sdpa"], plain.model_inputs(), plain.labels)
    got = loss_and_grads(models[A.IMPLEMENTATION], counted.model_inputs(), counted.labels)
    assert [c["window"] for c in kernel_calls] == [None, 5]  # the first layer full, the second sliding
    assert got[1].item() == pytest.approx(ref[1].item(), rel=1e-5)  # a sum over hundreds of tokens: ulps of each
    for name, grad in ref[2].items():
        assert close(got[2][name], grad, 1e-5), name


def test_fa2_falls_back_to_sdpa_without_lengths_and_for_generation(kernel_calls):
    sdpa, fa2 = tiny_qwen2("sdpa"), tiny_qwen2(A.IMPLEMENTATION)
    ids = torch.randint(1, VOCAB, (2, 10), generator=torch.Generator().manual_seed(3))
    assert close(fa2(ids).logits, sdpa(ids).logits, 1e-6)
    kwargs = dict(max_new_tokens=5, do_sample=False, pad_token_id=0)
    assert fa2.generate(ids, **kwargs).tolist() == sdpa.generate(ids, **kwargs).tolist()  # chat, predict: a KV cache
    assert kernel_calls == []


def test_the_saved_config_does_not_name_ftuis_attention(tmp_path):
    tiny_qwen2(A.IMPLEMENTATION).save_pretrained(tmp_path)
    assert "ftui" not in (tmp_path / "config.json").read_text()  # final/ loads anywhere


def test_attn_implementation_follows_llamafactorys_values():
    assert A.attn_implementation("auto") is None  # transformers' own choice, as LLaMA-Factory's auto
    assert A.attn_implementation("sdpa") == "sdpa"
    assert A.attn_implementation("disabled") == "eager"
    assert A.attn_implementation("fa2") == A.IMPLEMENTATION


GEMMA2 = {"model_type": "gemma2", "architectures": ["Gemma2ForCausalLM"], "vocab_size": 256, "hidden_size": 32,
          "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 16,
          "attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0, "sliding_window": 16, "max_position_embeddings": 128}


@pytest.mark.parametrize("flash_attn,loaded", [("auto", "eager"), ("disabled", "eager")])
def test_auto_loads_a_model_sdpa_cannot_compute_with_eager_attention(tmp_path, flash_attn, loaded):
    """Gemma 2 soft-caps its attention logits, which SDPA does not compute: transformers refuses
    to load it with SDPA named, and picks eager attention itself when none is named (auto), as
    under LLaMA-Factory. A model SDPA computes still gets SDPA from auto."""
    from ftui.runner.model import load_model

    (tmp_path / "config.json").write_text(json.dumps(GEMMA2))
    cfg = demo_config().model_copy(update={"flash_attn": flash_attn, "model_name_or_path": str(tmp_path), "model_init": "random"})
    assert problems(flash_attn=flash_attn, model_name_or_path=str(tmp_path)) == []
    assert load_model(cfg, torch.device("cpu")).config._attn_implementation == loaded
    demo = demo_config().model_copy(update={"flash_attn": "auto", "model_init": "random"})
    assert load_model(demo, torch.device("cpu")).config._attn_implementation == "sdpa"


def test_sdpa_is_refused_for_a_model_whose_attention_it_cannot_compute(tmp_path, monkeypatch):
    from ftui.presets import families
    from ftui.runner.model import load_model

    (tmp_path / "config.json").write_text(json.dumps(GEMMA2))
    (problem,) = problems(flash_attn="sdpa", model_name_or_path=str(tmp_path))
    assert "gemma2 models without SDPA" in problem.message and "flash_attn: auto" in problem.message
    cfg = demo_config().model_copy(update={"flash_attn": "sdpa", "model_name_or_path": str(tmp_path), "model_init": "random"})
    with pytest.raises(ValueError, match="gemma2 models without SDPA"):  # a hub model validation could not read: at load
        load_model(cfg, torch.device("cpu"))
    # a model type the list lacks (another transformers): its class says, at load
    monkeypatch.setattr(families, "NO_SDPA_MODEL_TYPES", ())
    assert problems(flash_attn="sdpa", model_name_or_path=str(tmp_path)) == []
    with pytest.raises(ValueError, match="gemma2 models without SDPA"):
        load_model(cfg, torch.device("cpu"))
    monkeypatch.undo()
    (gpt_oss,) = problems(flash_attn="sdpa", model_name_or_path=str(_config_dir(tmp_path / "oss", {"model_type": "gpt_oss"})))
    assert "gpt_oss models without SDPA" in gpt_oss.message
    assert problems(flash_attn="sdpa") == []  # the demo's model: SDPA computes it
    # every listed type is one whose transformers class has no SDPA
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    import transformers

    for model_type in families.NO_SDPA_MODEL_TYPES:
        name = MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(model_type)
        if name is not None:
            assert getattr(transformers, name)._supports_sdpa is False, model_type


def _config_dir(path, config):
    path.mkdir()
    (path / "config.json").write_text(json.dumps(config))
    return path


# --- each torch's varlen_attn


def fake_varlen(signature: str, seen: list):
    """varlen_attn as torch 2.10 (is_causal, no scale, no GQA switch), 2.11 (window_size, scale) or 2.13
    (and enable_gqa) declares it."""
    def compute(q, k, v, cu, scale, window_size=(-1, 0)):
        # FlashAttention's rule: a key at most window_size[0] positions back (-1: any)
        left = window_size[0]
        return reference_kernel([])(q, k, v, cu, q.size(0), scale, left + 1 if left >= 0 else None)

    if signature == "2.10":
        def varlen_attn(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, *, is_causal=False, return_aux=None):
            seen.append(dict(is_causal=is_causal, heads=(query.size(1), key.size(1))))
            assert is_causal
            return compute(query, key, value, cu_seq_q, query.size(-1) ** -0.5)
    elif signature == "2.11":
        def varlen_attn(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, *, return_aux=None, scale=None,
                        window_size=(-1, -1), seqused_k=None, block_table=None, num_splits=None):
            seen.append(dict(window_size=window_size, heads=(query.size(1), key.size(1))))
            assert window_size[1] == 0
            return compute(query, key, value, cu_seq_q, scale, window_size)
    else:
        def varlen_attn(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, *, return_aux=None, scale=None,
                        window_size=(-1, -1), enable_gqa=False, seqused_k=None, block_table=None, num_splits=None):
            seen.append(dict(window_size=window_size, enable_gqa=enable_gqa, heads=(query.size(1), key.size(1))))
            assert window_size[1] == 0 and (enable_gqa or query.size(1) == key.size(1))
            return compute(query, key, value, cu_seq_q, scale, window_size)
    return varlen_attn


@pytest.mark.parametrize("signature,grouped_work,heads", [
    ("2.10", False, (4, 4)),  # no enable_gqa, and (no GPU here) not shown to take grouped heads: repeated
    ("2.11", False, (4, 4)),
    ("2.11", True, (4, 2)),  # a call on the GPU showed the kernel takes them: as they are
    ("2.13", False, (4, 2)),  # enable_gqa
])
def test_the_kernel_adapts_to_the_installed_varlen_attn(monkeypatch, signature, grouped_work, heads):
    import torch.nn.attention.varlen as varlen

    seen: list = []
    monkeypatch.setattr(varlen, "varlen_attn", fake_varlen(signature, seen))
    monkeypatch.setattr(A, "_grouped_heads_work", lambda fn, causal: (grouped_work, "" if grouped_work else " (check)"))
    kernel = A.causal_varlen_kernel()
    assert kernel.grouped == ("as they are" if heads == (4, 2) else "repeated (check)")
    g = torch.Generator().manual_seed(4)
    q, k, v = torch.randn(12, 4, 8, generator=g), torch.randn(12, 2, 8, generator=g), torch.randn(12, 2, 8, generator=g)
    cu = torch.tensor([0, 5, 12], dtype=torch.int32)
    out = kernel(q, k, v, cu, 12, 8 ** -0.5)
    assert close(out, reference_kernel([])(q, k, v, cu, 12, 8 ** -0.5), 1e-6)
    assert seen[0]["heads"] == heads
    if signature == "2.10":  # no scale, no window arguments: another scale or a window cannot be honoured, SDPA then
        assert kernel(q, k, v, cu, 12, 0.5) is None and kernel(q, k, v, cu, 12, 8 ** -0.5, 3) is None
    else:
        assert close(kernel(q, k, v, cu, 12, 0.5), reference_kernel([])(q, k, v, cu, 12, 0.5), 1e-6)
        assert signature != "2.13" or seen[0]["enable_gqa"]
        # transformers' window of 3 (this position and the 2 before) is FlashAttention's (2, 0)
        assert close(kernel(q, k, v, cu, 12, 8 ** -0.5, 3), reference_kernel([])(q, k, v, cu, 12, 8 ** -0.5, 3), 1e-6)
        assert seen[-1]["window_size"] == (2, 0)


def test_grouped_heads_go_in_as_they_are_only_where_a_call_shows_the_kernel_takes_them(monkeypatch):
    """The check torch 2.11 gets on the GPU at load, run here on the CPU against fakes."""
    cpu = torch.device("cpu")

    def grouped_ok(query, key, value, cu_q, cu_k, max_q, max_k, **kw):  # FlashAttention-2: grouped heads natively
        return reference_kernel([])(query, key, value, cu_q, max_q, query.size(-1) ** -0.5)

    def heads_must_match(query, key, value, *args, **kw):
        if query.size(1) != key.size(1):
            raise RuntimeError("number of heads in key/value must divide number of heads in query")
        return grouped_ok(query, key, value, *args, **kw)

    def wrong(query, key, value, *args, **kw):  # grouped heads run, but every query head on the first K/V head
        if query.size(1) != key.size(1):
            key, value = key[:, :1].expand_as(key), value[:, :1].expand_as(value)
        return grouped_ok(query, key, value, *args, **kw)

    causal = {"window_size": (-1, 0)}
    assert A._grouped_heads_work(grouped_ok, causal, cpu) == (True, "")
    works, why = A._grouped_heads_work(heads_must_match, causal, cpu)
    assert not works and "RuntimeError: number of heads" in why
    assert A._grouped_heads_work(wrong, causal, cpu) == (False, " (grouped heads gave other values than repeated ones)")
    if not torch.cuda.is_available():
        assert A._grouped_heads_work(grouped_ok, causal) == (False, " (no GPU to check grouped heads on)")


# --- the preference and reward stages: pairs, and (kto) rows sliced from a batch with lengths


def stage_outcome(stage_name, implementation, batch, monkeypatch):
    from test_preference_chunked import Engine, stage_cfg

    from ftui.runner.stages.dpo import DPOStage
    from ftui.runner.stages.kto import KTOStage
    from ftui.runner.stages.rm import RewardStage

    model = tiny_qwen2(implementation)
    cfg = stage_cfg(pref_ftx=0.3)
    stage = {"dpo": DPOStage, "kto": KTOStage, "rm": RewardStage}[stage_name](cfg, None)
    stage.keep_start(model)
    with torch.no_grad():  # a reference that differs from the policy
        for p in model.parameters():
            p.add_(0.02 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))
    stage.prepare_model(model)
    stage.attach(Engine(model))
    model.train(stage_name != "rm")  # rm keeps the model's and its value head's dropout: off here, to compare
    out = stage.loss(model, batch, contextlib.nullcontext)
    out.total.backward()
    return out, {n: p.grad for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("stage_name", ["dpo", "kto", "rm"])
def test_preference_stages_give_sdpa_s_loss_and_gradients(kernel_calls, monkeypatch, stage_name):
    from ftui.runner.stages.kto import FeedbackCollator
    from ftui.runner.stages.preference import FeedbackExample, PairCollator, PairExample

    data = examples(8, seed=5)
    if stage_name in ("dpo", "rm"):
        items = [PairExample(data[i], data[i + 1]) for i in range(0, 8, 2)]
        collate = lambda counted: PairCollator(0, pad_to_multiple=8, sequence_lengths=counted)(items)  # noqa: E731
    else:
        items = [FeedbackExample(data[i], data[i + 1], desirable=i % 4 == 0) for i in range(0, 8, 2)]
        collate = lambda counted: FeedbackCollator(0, pad_to_multiple=8, sequence_lengths=counted)(items)  # noqa: E731
    ref_out, ref_grads = stage_outcome(stage_name, "sdpa", collate(False), monkeypatch)
    out, grads = stage_outcome(stage_name, A.IMPLEMENTATION, collate(True), monkeypatch)
    # every forward took the lengths (2 layers each): dpo the policy and the reference copy over
    # the pairs, kto the reference over all rows then the policy's KL rows and target rows (each a
    # slice of the batch's lengths), rm the model once
    forwards = {"dpo": [8, 8], "kto": [8, 4, 4], "rm": [8]}[stage_name]
    width = collate(True).input_ids.size(1)
    assert len(kernel_calls) == 2 * len(forwards)
    assert [c["q"][0] // width for c in kernel_calls[::2]] == forwards
    # the loss and figures come from sums of log-probabilities and keep their rounding
    assert out.total.item() == pytest.approx(ref_out.total.item(), rel=1e-5, abs=LOGP_SUM_FLOOR)
    for name, value in ref_out.figures.items():
        assert out.figures[name].item() == pytest.approx(value.item(), rel=1e-5, abs=LOGP_SUM_FLOOR), name
    assert set(grads) == set(ref_grads) and grads
    for name, grad in ref_grads.items():
        assert close(grads[name], grad, 1e-4), name


# --- validation


def problems(facts: MachineFacts | None = None, **over) -> list[FieldProblem]:
    cfg = demo_config().model_copy(update=over)
    facts = facts or MachineFacts.gather(cfg.gpus, cfg.nproc_per_node)
    return [p for p in config_problems(cfg, facts, read_model(cfg.model_name_or_path)) if p.field == "flash_attn"]


def test_fa3_is_refused_by_name():
    (problem,) = problems(flash_attn="fa3")
    assert "FlashAttention-3" in problem.message and "fa2" in problem.message


def test_fa2_is_refused_on_the_cpu_and_for_fp32():
    (cpu,) = problems(flash_attn="fa2", device="cpu", bf16=True)
    assert "CUDA" in cpu.message
    with for_another_machine():  # planning for GPUs elsewhere: the GPU is assumed, the precision still counts
        assert problems(flash_attn="fa2", device="auto", bf16=True) == []
        (fp32,) = problems(flash_attn="fa2", device="auto", bf16=False, fp16=False)
        assert "bf16" in fp32.message
    assert problems(flash_attn="sdpa", device="cpu") == problems(flash_attn="disabled", device="cpu") == []


def test_fa2_needs_torch_2_10():
    from dataclasses import replace

    gpu = replace(MachineFacts.without_gpu(), machine_gpus=1, visible_gpus=1)  # one Ampere-or-newer GPU
    (old,) = problems(replace(gpu, torch_version=(2, 9)), flash_attn="fa2", device="cuda", bf16=True)
    assert "2.10" in old.message and "2.9" in old.message
    assert problems(replace(gpu, torch_version=(2, 11)), flash_attn="fa2", device="cuda", bf16=True) == []


def test_llamafactorys_flash_attn_key_is_a_setting_now(tmp_path):
    path = tmp_path / "lf.yaml"
    path.write_text(json.dumps(json.loads(demo_config().model_dump_json()) | {"flash_attn": "disabled"}))
    cfg, warnings = load_config(path)
    assert cfg.flash_attn == "disabled" and not any("flash_attn" in w for w in warnings)


# --- torch's own op (a CPU kernel in FlashAttention-2's place) under torch.compile

_CPU_OP: list = []  # the calls while a test lends the op its CPU kernel; empty: no CPU kernel, as in torch


def _cpu_forward(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, is_causal=False, scale=None, *rest, **kw):
    if not _CPU_OP:
        raise NotImplementedError("torch_attn::_varlen_attn has no CPU kernel")
    _CPU_OP[0].append(cu_seq_q.tolist())
    assert is_causal and max_q >= int((cu_seq_q[1:] - cu_seq_q[:-1]).max())
    out = reference_kernel([])(query, key, value, cu_seq_q, max_q, scale)
    return out, torch.zeros(query.size(1), query.size(0)), torch.zeros(2, dtype=torch.uint64)


def _cpu_backward(grad_out, query, key, value, out, lse, cu_seq_q, cu_seq_k, max_q, max_k, is_causal, rng_state, scale=None, *rest, **kw):
    """Attention's gradients written out (a kernel runs below autograd, so none is taken here):
    per sequence, P = softmax(causal(scale q k^T)), dV = P^T dO, dS = P (dO v^T - rowsum(dO o)),
    dQ = scale dS k, dK = scale dS^T q; grouped K/V heads sum their query heads' gradients."""
    if not _CPU_OP:
        raise NotImplementedError("torch_attn::_varlen_attn_backward has no CPU kernel")
    group = query.size(1) // key.size(1)
    grads = [torch.zeros_like(t) for t in (query, key, value)]
    bounds = cu_seq_q.tolist()
    for a, b in zip(bounds, bounds[1:]):
        q, do, o = (t[a:b].transpose(0, 1) for t in (query, grad_out, out))  # (heads, n, dim)
        k, v = (t[a:b].transpose(0, 1).repeat_interleave(group, dim=0) for t in (key, value))
        s = scale * q @ k.transpose(1, 2)
        s = s.masked_fill(torch.ones(b - a, b - a, dtype=torch.bool).triu(1), float("-inf"))
        p = s.softmax(-1)
        ds = p * (do @ v.transpose(1, 2) - (do * o).sum(-1, keepdim=True))
        parts = (scale * ds @ k, scale * ds.transpose(1, 2) @ q, p.transpose(1, 2) @ do)
        grads[0][a:b] = parts[0].transpose(0, 1)
        for i in (1, 2):
            grads[i][a:b] = parts[i].unflatten(0, (key.size(1), group)).sum(1).transpose(0, 1)
    return tuple(grads)


@pytest.fixture
def cpu_varlen_op():
    """torch's varlen_attn custom op as it is (its Python wrapper, autograd formula and fake
    kernel for tracing), with a CPU kernel for the time of the test."""
    import torch.nn.attention.varlen as V

    if not getattr(V._varlen_attn, "_ftui_cpu", False):
        V._varlen_attn.register_kernel("cpu")(_cpu_forward)
        V._varlen_attn_backward.register_kernel("cpu")(_cpu_backward)
        V._varlen_attn._ftui_cpu = True
    calls: list = []
    _CPU_OP.append(calls)
    yield calls
    _CPU_OP.clear()


def test_torch_s_op_under_compile_gives_sdpa_s_loss_and_gradients(cpu_varlen_op, monkeypatch):
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    monkeypatch.setattr(A, "_KERNEL", [])  # the real kernel: torch.nn.attention.varlen.varlen_attn
    monkeypatch.setattr(A, "FLASH_DTYPES", A.FLASH_DTYPES + (torch.float32,))
    sdpa, fa2 = tiny_qwen2("sdpa"), tiny_qwen2(A.IMPLEMENTATION)
    for layer in fa2.model.layers:
        layer.compile(backend="aot_eager")  # as ftui's torch_compile, without a C++ compiler
    for seed in range(5):  # batches of other widths and numbers of sequences
        rows = pack_examples(examples(10 + 3 * seed, seed=seed), 64)
        plain = Collator(0, pad_to_multiple=8)(rows)
        counted = Collator(0, pad_to_multiple=8, sequence_lengths=True)(rows)
        ref = loss_and_grads(sdpa, plain.model_inputs(), plain.labels)
        got = loss_and_grads(fa2, counted.model_inputs(), counted.labels)
        assert got[1].item() == pytest.approx(ref[1].item(), rel=1e-5)  # a sum over hundreds of tokens: ulps of each
        for name, grad in ref[2].items():
            assert close(got[2][name], grad, 1e-5), name
    assert len(cpu_varlen_op) == 5 * 2  # the op ran in every layer of every step
    assert sum(counters["graph_break"].values()) == 0
    assert 1 <= counters["stats"]["unique_graphs"] <= 3  # compiled, and recompiled as widths and lengths first vary, not every step


def test_the_op_without_its_cpu_kernel_is_refused_by_torch_not_by_its_signature():
    q = torch.randn(6, 2, 8)
    with pytest.raises(NotImplementedError):  # a TypeError here: varlen_attn's signature moved
        A.causal_varlen_kernel()(q, q, q, torch.tensor([0, 6], dtype=torch.int32), 6, 8 ** -0.5)


# --- the stages' collators, batches on the way to the device, fallbacks, what fa2 is refused


def test_every_stage_s_collator_counts_the_lengths_with_fa2_only():
    from types import SimpleNamespace

    from ftui.runner.stages.base import Stage
    from ftui.runner.stages.kto import KTOStage
    from ftui.runner.stages.preference import FeedbackExample, PairExample, PreferenceStage

    tokenizer = SimpleNamespace(pad_token_id=0)
    data = examples(4, seed=7)
    cases = [(Stage, data[:2]), (PreferenceStage, [PairExample(data[0], data[1])]),
             (KTOStage, [FeedbackExample(data[2], data[3], desirable=True)])]
    for cls, items in cases:
        for flash_attn in ("fa2", "auto"):
            stage = cls.__new__(cls)
            stage.cfg, stage.tokenizer = demo_config().model_copy(update={"flash_attn": flash_attn}), tokenizer
            batch = stage.collator(pad_to_multiple=8)(items).to(torch.device("cpu"))
            assert (batch.cu_seqlens is not None) == (flash_attn == "fa2"), (cls, flash_attn)
            if flash_attn == "fa2":
                assert batch.cu_seqlens[-1].item() == batch.input_ids.numel() and len(batch.row_sequences) == len(batch.input_ids)
                assert type(batch).__name__ == ("FeedbackBatch" if cls is KTOStage else "Batch")
                assert cls is not KTOStage or batch.desirable.tolist() == [True]


def fake_module(training=False):
    from types import SimpleNamespace

    return SimpleNamespace(is_causal=True, training=training, num_key_value_groups=2)


@pytest.mark.parametrize("kwargs,training,why", [
    (dict(dropout=0.1), True, "attention dropout while training"),
    (dict(is_causal=False), False, "non-causal attention"),
    (dict(position_bias=torch.zeros(1)), False, "a position bias"),  # SDPA adds it
])
def test_what_the_kernel_cannot_compute_runs_sdpa_and_is_noted(kernel_calls, monkeypatch, kwargs, training, why):
    monkeypatch.setattr(A, "FALLBACKS", set())
    monkeypatch.setattr("transformers.integrations.sdpa_attention.sdpa_attention_forward", lambda *a, **k: ("sdpa", None))
    monkeypatch.setattr(A, "per_example_sdpa", lambda *a: None)  # on the CPU SDPA would run per example (test_padding_free)
    g = torch.Generator().manual_seed(8)
    q, k = torch.randn(1, 4, 6, 8, generator=g), torch.randn(1, 2, 6, 8, generator=g)
    cu = torch.tensor([0, 6], dtype=torch.int32)
    assert A.varlen_attention(fake_module(training), q, k, k, None, cu_seq_lens_q=cu, max_length_q=6, **kwargs)[0] == "sdpa"
    assert kernel_calls == [] and A.FALLBACKS == {why}
    out, _ = A.varlen_attention(fake_module(), q, k, k, None, cu_seq_lens_q=cu, max_length_q=6)
    assert out.shape == (1, 6, 4, 8) and len(kernel_calls) == 1 and A.FALLBACKS == {why}


@pytest.mark.parametrize("kwargs", [dict(softcap=30.0), dict(s_aux=torch.zeros(4))])
def test_what_neither_the_kernel_nor_sdpa_computes_is_refused(kernel_calls, kwargs):
    q, k = torch.randn(1, 4, 6, 8), torch.randn(1, 2, 6, 8)
    with pytest.raises(ValueError, match="flash_attn: auto"):
        A.varlen_attention(fake_module(), q, k, k, None, cu_seq_lens_q=torch.tensor([0, 6], dtype=torch.int32), **kwargs)
    assert kernel_calls == []


def test_what_the_model_s_config_says_will_run_sdpa_is_noted_at_load(monkeypatch):
    from types import SimpleNamespace

    def noted(config, windows=True):
        kernel = reference_kernel([])
        kernel.windows = windows
        monkeypatch.setattr(A, "_KERNEL", [kernel])
        monkeypatch.setattr(A, "FALLBACKS", set())
        A.note_model(config)
        return A.FALLBACKS

    assert noted(SimpleNamespace(attention_dropout=0.0, sliding_window=4096, use_sliding_window=False)) == set()  # Qwen2's default
    assert noted(SimpleNamespace(attention_dropout=0.1)) == {"attention dropout while training"}
    mistral = SimpleNamespace(sliding_window=4096)
    assert noted(mistral) == set() and noted(mistral, windows=False) == {"a sliding window (this torch's kernel has none)"}
    gemma3 = SimpleNamespace(sliding_window=512, use_sliding_window=False, layer_types=["sliding_attention", "full_attention"])
    assert noted(gemma3, windows=False) == {"a sliding window (this torch's kernel has none)"}
    qwen2 = SimpleNamespace(sliding_window=512, use_sliding_window=True, layer_types=["full_attention"] * 2)  # max_window_layers: none slides
    assert noted(qwen2, windows=False) == set()


def test_describe_says_how_grouped_heads_go_in(monkeypatch):
    kernel = reference_kernel([])
    kernel.grouped = "repeated (grouped heads: RuntimeError: no)"
    monkeypatch.setattr(A, "_KERNEL", [kernel])
    assert A.describe() == "fa2: torch varlen FlashAttention-2, grouped K/V heads repeated (grouped heads: RuntimeError: no)"
    monkeypatch.setattr(A, "_KERNEL", [None])
    assert A.describe() == "fa2 unavailable: SDPA"


def test_fa2_refuses_a_model_whose_attention_it_cannot_run(tmp_path):
    from ftui.runner.model import load_model

    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen3_5_text", "architectures": ["Qwen3_5ForCausalLM"]}))
    (problem,) = problems(flash_attn="fa2", device="cuda", bf16=True, model_name_or_path=str(tmp_path))
    assert "qwen3_5_text" in problem.message and "flash_attn: auto" in problem.message
    cfg = demo_config().model_copy(update={"flash_attn": "fa2", "model_name_or_path": str(tmp_path)})
    with pytest.raises(ValueError, match="qwen3_5_text"):  # a hub name validation could not read: refused at load
        load_model(cfg, torch.device("cpu"))


def test_fa2_refuses_qwen2_moe_s_sliding_window_which_its_layers_do_not_pass_on():
    from ftui.config.model_checks import fa2_model_problem

    assert fa2_model_problem({"model_type": "qwen2_moe", "use_sliding_window": False}) is None  # Qwen1.5-MoE as released
    assert "sliding window" in fa2_model_problem({"model_type": "qwen2_moe", "use_sliding_window": True})
    assert fa2_model_problem({"model_type": "qwen2", "use_sliding_window": True}) is None  # Qwen2 passes it per layer
    assert "gpt_oss" in fa2_model_problem({"model_type": "gpt_oss"})


def test_fa2_is_refused_on_a_pre_ampere_gpu(monkeypatch):
    from test_gpu import machine
    from tests.fake_nvml import FakeGpu

    machine(monkeypatch, [FakeGpu(name="Tesla T4", uuid="GPU-aaaa", capability=(7, 5))])
    (old,) = problems(flash_attn="fa2", device="cuda", fp16=True, bf16=False)
    assert "Tesla T4" in old.message and "7.5" in old.message and "Ampere" in old.message
    machine(monkeypatch, [FakeGpu(name="NVIDIA A100", uuid="GPU-bbbb", capability=(8, 0))])
    assert problems(flash_attn="fa2", device="cuda", bf16=True) == []
