"""The preference stages' log-probabilities from the last hidden states in chunks (never the
full logits) equal those from full logits: per-row sums and counts, the gradients of the
hidden states, weight and bias through a nonlinear loss of the sums (untied, tied, with a
bias, chunks that do not divide the positions, masked rows, bf16 autocast), the DPO and KTO
stages' losses, figures and gradients (the reference copy and the adapter-off reference
included), and whole DPO / KTO runs' loss and eval curves with ``chunked_loss`` on and off."""

from __future__ import annotations

import contextlib
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from conftest import steps_of, tiny_config, train_sync
from ftui.runner import loss as L
from ftui.runner.data import IGNORE, Batch
from test_gpu_readiness import tiny_llama
from tests.tolerances import LOGP_SUM_FLOOR, close

VOCAB = 1000


class Toy(nn.Module):
    """Embedding -> tanh -> output projection: the smallest causal-LM-shaped model, with the
    output projection's bias and tying chosen; keeps its last hidden states' gradient."""

    def __init__(self, bias: bool, tied: bool, hidden: int = 16):
        super().__init__()
        torch.manual_seed(0)
        self.embed = nn.Embedding(VOCAB, hidden)
        self.lm_head = nn.Linear(hidden, VOCAB, bias=bias)
        if tied:
            self.lm_head.weight = self.embed.weight
        self.hidden = None

    def get_output_embeddings(self):
        return self.lm_head

    def forward(self, input_ids, use_cache=False, **_):
        self.hidden = torch.tanh(self.embed(input_ids) * 3)
        self.hidden.retain_grad()
        return SimpleNamespace(logits=self.lm_head(self.hidden))


def ids_and_labels(rows: int = 4, length: int = 23, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.randint(0, VOCAB, (rows, length), generator=torch.Generator().manual_seed(seed))
    labels = ids.clone()
    labels[:, :5] = IGNORE  # a masked prompt
    labels[1, 15:] = IGNORE  # padding
    labels[2] = IGNORE  # a row with nothing labelled (counts 0, sum 0)
    return ids, labels


def nonlinear(sums: torch.Tensor) -> torch.Tensor:
    """A loss that, like DPO's, gives every row its own gradient."""
    chosen, rejected = sums.view(2, -1)
    return -torch.nn.functional.logsigmoid(0.1 * (chosen - rejected)).sum() + 1e-3 * (sums ** 2).sum()


def logps_and_grads(model, head, ids, labels, autocast=contextlib.nullcontext):
    model.zero_grad()
    sums, counts = L.micro_batch_logps(model, head, {"input_ids": ids}, labels, autocast)
    nonlinear(sums).backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return sums.detach(), counts, grads, model.hidden.grad.clone() if getattr(model, "hidden", None) is not None else None


@pytest.mark.parametrize("bias,tied", [(False, False), (True, False), (False, True), (True, True)])
def test_chunked_logps_equal_full_logits_in_value_and_gradients(bias, tied, monkeypatch):
    model = Toy(bias, tied)
    ids, labels = ids_and_labels()
    full = logps_and_grads(model, None, ids, labels)
    monkeypatch.setattr(L, "chunk_tokens", lambda vocab: 7)  # 88 positions: the last chunk short
    head = L.install_chunked_loss(model)
    assert head is model.lm_head
    chunked = logps_and_grads(model, head, ids, labels)
    assert chunked[1].tolist() == full[1].tolist() == [18, 10, 0, 18]
    assert chunked[0][2].item() == 0.0
    assert close(chunked[0], full[0], 1e-5)  # sums of 18 log-probabilities in another order: ulps of each
    assert set(chunked[2]) == set(full[2]) and ("lm_head.bias" in full[2]) == bias
    for name, grad in full[2].items():
        assert close(chunked[2][name], grad, 1e-5), name
    assert close(chunked[3], full[3], 1e-5)  # the last hidden states' gradient
    assert model(ids).logits.shape == (4, 23, VOCAB)  # any other forward: plain logits


def test_chunked_logps_under_bf16_autocast_match_to_bf16_rounding(monkeypatch):
    model = tiny_llama(layers=2, hidden=64, vocab=VOCAB)
    ids, labels = ids_and_labels(seed=2)
    bf16 = lambda: torch.autocast("cpu", dtype=torch.bfloat16)  # noqa: E731
    full = logps_and_grads(model, None, ids, labels, bf16)
    monkeypatch.setattr(L, "chunk_tokens", lambda vocab: 10)
    chunked = logps_and_grads(model, L.install_chunked_loss(model), ids, labels, bf16)
    assert close(chunked[0], full[0], 1e-3)
    for name, grad in full[2].items():
        assert close(chunked[2][name], grad, 2e-2), name  # bf16 products, another summation order


def saved_for_backward(fn) -> list[torch.Size]:
    shapes: list[torch.Size] = []

    def pack(t):
        shapes.append(t.shape)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return shapes


def test_no_logits_sized_tensor_is_kept_for_backward(monkeypatch):
    model = tiny_llama(layers=1, hidden=64, vocab=VOCAB)
    ids, labels = ids_and_labels(rows=8, length=40, seed=3)
    logits_size = ids.numel() * VOCAB // 2  # even half of the logits would do (the weight is a fifth of them)

    def forward(head):
        return lambda: L.micro_batch_logps(model, head, {"input_ids": ids}, labels, contextlib.nullcontext)

    assert max(s.numel() for s in saved_for_backward(forward(None))) >= logits_size  # the full path keeps them
    monkeypatch.setattr(L, "chunk_tokens", lambda vocab: 16)
    head = L.install_chunked_loss(model)
    assert max(s.numel() for s in saved_for_backward(forward(head))) < logits_size


# --- the stages


def stage_cfg(**over) -> SimpleNamespace:
    base = dict(pref_beta=0.1, pref_loss="sigmoid", pref_ftx=0.0, dpo_label_smoothing=0.0, simpo_gamma=0.5,
                kto_chosen_weight=1.0, kto_rejected_weight=0.8, finetuning_type="full", chunked_loss=True,
                enable_liger_kernel=False)
    return SimpleNamespace(**(base | over))


class Engine:
    """What a preference stage asks of the engine: the single engine's placement."""

    name = "single"
    info = SimpleNamespace(rank=0)

    def __init__(self, model):
        self.model = model

    def prepare_frozen(self, model):
        return model

    def unwrap(self):
        return self.model


def lora(model):
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
    torch.manual_seed(5)
    for name, p in model.named_parameters():
        if "lora_B" in name:  # off zero: the policy differs from its adapter-off reference
            p.data.normal_(0, 0.05)
    return model


def stage_result(stage_name: str, cfg: SimpleNamespace, batch: Batch):
    from ftui.runner.stages.dpo import DPOStage
    from ftui.runner.stages.kto import KTOStage

    model = tiny_llama(layers=2, hidden=64, vocab=VOCAB)
    stage = {"dpo": DPOStage, "kto": KTOStage}[stage_name](cfg, None)
    stage.keep_start(model)
    if cfg.finetuning_type == "full":  # a reference that differs from the policy
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.02 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))
    else:
        model = lora(model)
    stage.prepare_model(model)
    stage.attach(Engine(model))
    assert (stage.head is not None) == cfg.chunked_loss
    reference = getattr(stage, "reference", None)
    if reference is not None and reference.copy is not None:
        assert (reference.head is not None) == cfg.chunked_loss
    out = stage.loss(model, batch, contextlib.nullcontext)
    out.total.backward()
    grads = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
    return out, grads


@pytest.mark.parametrize("stage_name,settings", [
    ("dpo", dict(pref_ftx=0.5)),  # the reference copy, and the SFT term on the chosen answers
    ("dpo", dict(pref_loss="orpo")),  # average log-probabilities, no reference
    ("dpo", dict(finetuning_type="lora", pref_loss="ipo")),  # the reference is the policy with its adapter off
    ("kto", dict(pref_ftx=0.3)),  # the KL rows (without gradients) and the reference copy
    ("kto", dict(finetuning_type="lora")),
])
def test_stage_losses_figures_and_gradients_are_the_full_logits_ones(stage_name, settings, monkeypatch):
    monkeypatch.setattr(L, "chunk_tokens", lambda vocab: 24)
    ids, labels = ids_and_labels(rows=4, length=30, seed=4)
    labels[2, 20:] = ids[2, 20:]  # every row has an answer
    batch = Batch(ids, labels, torch.ones_like(ids), None, 0, 0, 2)
    if stage_name == "kto":
        from ftui.runner.stages.kto import FeedbackBatch

        batch = FeedbackBatch(**vars(batch), desirable=torch.tensor([True, False]))
    results = {chunked: stage_result(stage_name, stage_cfg(chunked_loss=chunked, **settings), batch)
               for chunked in (True, False)}
    (out, grads), (ref_out, ref_grads) = results[True], results[False]
    # the loss and figures come from sums of log-probabilities near -200 and keep their rounding
    assert out.total.item() == pytest.approx(ref_out.total.item(), rel=1e-5, abs=LOGP_SUM_FLOOR)
    for name, value in ref_out.figures.items():
        assert out.figures[name].item() == pytest.approx(value.item(), rel=1e-5, abs=LOGP_SUM_FLOOR), name
    assert set(grads) == set(ref_grads) and grads
    for name, grad in ref_grads.items():
        assert close(grads[name], grad, 1e-4), name


# --- whole runs


# slow (CI time, ~45 s a stage): the stage tests above check the equality, and the default
# preference runs of tests/test_stage_preference.py train with the chunks (the default)
@pytest.mark.slow
@pytest.mark.parametrize("stage,method", [("dpo", "full"), ("kto", "lora")])
def test_preference_runs_give_the_same_curve_with_and_without_chunks(tmp_path, lf_data, stage, method):
    curves, evals = {}, {}
    for chunked in (True, False):
        cfg = tiny_config(tmp_path / str(chunked), stage=stage, dataset="kto_en_demo" if stage == "kto" else "dpo_en_demo",
                          dataset_dir=str(lf_data), cutoff_len=64, max_samples=12, val_size=0.34,
                          per_device_train_batch_size=2, per_device_eval_batch_size=2, max_steps=4, eval_steps=2,
                          finetuning_type=method, learning_rate=5e-3, chunked_loss=chunked, run_name=f"{stage}-{chunked}")
        run_dir, events, proc = train_sync(cfg)
        assert proc.returncode == 0, (run_dir / "train.log").read_text()[-3000:]
        curves[chunked] = [e["loss"] for e in steps_of(events)]
        evals[chunked] = [e["eval_loss"] for e in events if e["event"] == "eval"]
    assert len(curves[True]) == 4 and len(evals[True]) == 2
    assert curves[True] == pytest.approx(curves[False], rel=1e-5)
    assert evals[True] == pytest.approx(evals[False], rel=1e-5)
