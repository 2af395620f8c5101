"""The preference stages against LLaMA-Factory 0.9.5 (issue 15), from stored reference data
(tests/data/llamafactory_preference: make_reference.py ran LLaMA-Factory itself; CI never
installs it):

- encoding: what LF's pairwise (dpo, rm) and feedback (kto) processors made of its demo
  preference sets and two hand-written alpaca sets, for four templates at two cutoffs: ftui's
  stages must give the same token ids and labels, and drop the same records;
- losses: on the same fixed fp32 logits, ftui's DPO losses, rewards and log-probabilities
  equal LF's CustomDPOTrainer (sigmoid, with label smoothing and pref_ftx; orpo; simpo) and, for
  hinge and ipo, TRL 0.24's dpo_loss with that loss type: LF 0.9.5 does not pass pref_loss to
  TRL, so its hinge and ipo silently compute the sigmoid loss (stored as `per_pair_loss`), while
  ftui computes what the name says (stored as `trl_loss_as_named`); KTO equals LF's
  CustomKTOTrainer (KL term, weights, rescaled SFT term); the reward model's pairwise loss and
  accuracy equal LF's PairwiseTrainer and ComputeAccuracy. To 1e-5, gradients included.
"""

from __future__ import annotations

import json
import lzma
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from ftui.data.chat_template import fix_tokenizer
from ftui.presets.templates import TEMPLATES
from ftui.runner.stages import make_stage
from ftui.runner.loss import sequence_logps
from ftui.runner.reward import pair_scores
from tests.conftest import tiny_config
from tests.test_templates import family_tokenizer

REF = Path(__file__).resolve().parent / "data" / "llamafactory_preference"
ENCODING = json.loads(lzma.decompress((REF / "encoding.json.xz").read_bytes()))
LOSSES = json.loads((REF / "losses.json").read_text())


def _case_id(case: dict) -> str:
    return f"{case['stage']}-{case['dataset']}-{case['template']}-{case['cutoff_len']}"


@pytest.mark.parametrize("case", ENCODING["cases"], ids=_case_id)
def test_preference_examples_match_llamafactory(case, tmp_path):
    tok = family_tokenizer(case["template"], False, tmp_path)
    fix_tokenizer(tok, TEMPLATES[case["template"]])
    assert (len(tok), tok.eos_token) == (case["vocab"], case["eos"])
    stages = ("dpo", "rm") if case["stage"] == "rm" else ("kto",)
    for stage in stages:  # dpo reads its data exactly as rm (LF calls get_dataset with stage rm for both)
        cfg = tiny_config(tmp_path, stage=stage, dataset=case["dataset"], dataset_dir=str(REF / "data"),
                          template=case["template"], max_samples=None)
        cfg = cfg.model_copy(update={"cutoff_len": case["cutoff_len"]})  # beyond the demo model's positions: data only
        data = make_stage(cfg, tok).build_data(pack=False)
        assert data.records == case["records"] and len(data.train) == len(case["examples"]) == case["records"] - case["dropped"]
        for i, (got, ref) in enumerate(zip(data.train, case["examples"])):
            if stage == "kto":
                mine = {"input_ids": got.target.input_ids, "labels": got.target.labels, "kl_input_ids": got.kl.input_ids,
                        "kl_labels": got.kl.labels, "kto_tag": got.desirable}
            else:
                mine = {"chosen_input_ids": got.chosen.input_ids, "chosen_labels": got.chosen.labels,
                        "rejected_input_ids": got.rejected.input_ids, "rejected_labels": got.rejected.labels}
            assert mine == ref, f"{stage} example {i} differs from LLaMA-Factory's"


def t(x) -> torch.Tensor:
    return torch.tensor(x, dtype=torch.float32)


def settings(case: dict) -> SimpleNamespace:
    base = dict(pref_beta=0.1, pref_loss="sigmoid", pref_ftx=0.0, dpo_label_smoothing=0.0, simpo_gamma=0.5,
                kto_chosen_weight=1.0, kto_rejected_weight=1.0)
    return SimpleNamespace(**(base | case["settings"]))


def stage_for(name: str, cfg: SimpleNamespace):
    """The stage object without data or model: its loss reads the config only."""
    from ftui.runner.stages.dpo import DPOStage
    from ftui.runner.stages.kto import KTOStage

    stage = {"dpo": DPOStage, "kto": KTOStage}[name].__new__({"dpo": DPOStage, "kto": KTOStage}[name])
    stage.cfg = cfg
    stage.head = None  # full logits: the fixed 'models' below give them
    return stage


class Fixed(torch.nn.Module):
    """A 'model' returning fixed logits for the rows it is given, found by their input ids."""

    def __init__(self, rows: dict[tuple[int, ...], torch.Tensor]):
        super().__init__()
        self.rows = rows

    def forward(self, input_ids, attention_mask=None, use_cache=False, **_):
        return SimpleNamespace(logits=torch.stack([self.rows[tuple(r.tolist())] for r in input_ids]))


class FixedReference:
    def __init__(self, model: Fixed):
        self.model = model

    def logps(self, _policy, _head, batch, autocast, rows=None):
        rows = rows or slice(None)
        return sequence_logps(self.model(batch.input_ids[rows]).logits, batch.labels[rows])


@pytest.mark.parametrize("case", LOSSES["dpo"], ids=lambda c: c["name"])
def test_dpo_losses_and_figures_match_the_reference(case):
    """Which reference: LLaMA-Factory 0.9.5's CustomDPOTrainer for sigmoid (label smoothing,
    pref_ftx), orpo and simpo; TRL 0.24's dpo_loss told the loss type for hinge and ipo."""
    from ftui.runner.data import Batch

    cfg = settings(case)
    stage = stage_for("dpo", cfg)
    labels = torch.tensor(case["labels"])
    ids = torch.tensor(case["input_ids"])
    policy_logits = t(case["policy_logits"]).requires_grad_(True)
    stage.reference = None
    if case["reference_logits"] is not None:
        stage.reference = FixedReference(Fixed({tuple(r.tolist()): l for r, l in zip(ids, t(case["reference_logits"]))}))
    pairs = labels.size(0) // 2
    batch = Batch(ids, labels, torch.tensor(case["attention_mask"]), None, 0, 0, pairs)
    policy = Fixed({tuple(r.tolist()): l for r, l in zip(ids, policy_logits)})
    out = stage.loss(policy, batch, lambda: torch.autocast("cpu", enabled=False))
    expected = case["trl_loss_as_named"] if cfg.pref_loss in ("hinge", "ipo") else case["per_pair_loss"]
    # the total of ipo's losses is near 90 (fp32 ulp 7.6e-6) and LF's was summed on another machine:
    # 1e-5 is one ulp there, so a relative 1e-6 (8 ulps) beside it
    assert out.total.item() == pytest.approx(sum(expected), rel=1e-6, abs=1e-5)
    chosen, rejected, _ = stage.pair_logps(*sequence_logps(policy_logits.detach(), labels))
    assert torch.allclose(chosen, t(case["policy_chosen_logps"]), atol=1e-5)
    assert torch.allclose(rejected, t(case["policy_rejected_logps"]), atol=1e-5)
    cr, rr = t(case["chosen_rewards"]), t(case["rejected_rewards"])
    figures = {k: v.item() / pairs for k, v in out.figures.items()}
    assert figures["rewards_chosen"] == pytest.approx(cr.mean().item(), abs=1e-5)
    assert figures["rewards_rejected"] == pytest.approx(rr.mean().item(), abs=1e-5)
    assert figures["rewards_margin"] == pytest.approx(case["metrics"]["rewards/margins"], abs=1e-5)
    assert figures["rewards_accuracy"] == pytest.approx(case["metrics"]["rewards/accuracies"], abs=1e-6)
    assert figures["logps_chosen"] == pytest.approx(case["metrics"]["logps/chosen"], abs=1e-4)
    if cfg.pref_loss not in ("hinge", "ipo"):  # LF's gradient is of its (sigmoid) loss for those two
        (out.total / pairs).backward()
        assert torch.allclose(policy_logits.grad, t(case["grad_policy_logits"]), atol=1e-5)


@pytest.mark.parametrize("case", LOSSES["kto"], ids=lambda c: c["name"])
def test_kto_loss_and_figures_match_llamafactory(case):
    from ftui.runner.stages.kto import FeedbackBatch

    cfg = settings(case)
    stage = stage_for("kto", cfg)
    n = len(case["kto_tags"])
    ids = torch.cat([torch.tensor(case["input_ids"]), torch.tensor(case["kl_input_ids"])])
    labels = torch.cat([torch.tensor(case["labels"]), torch.tensor(case["kl_labels"])])
    mask = torch.cat([torch.tensor(case["attention_mask"]), torch.tensor(case["kl_attention_mask"])])
    policy_logits = t(case["policy_logits"]).requires_grad_(True)
    rows = {tuple(r.tolist()): l for r, l in zip(ids, torch.cat([policy_logits, t(case["policy_kl_logits"])]))}
    ref_rows = {tuple(r.tolist()): l for r, l in zip(ids, torch.cat([t(case["reference_logits"]), t(case["reference_kl_logits"])]))}
    stage.reference = FixedReference(Fixed(ref_rows))
    batch = FeedbackBatch(ids, labels, mask, None, 0, 0, n, desirable=torch.tensor(case["kto_tags"]))
    out = stage.loss(Fixed(rows), batch, lambda: torch.autocast("cpu", enabled=False))
    assert (out.total / n).item() == pytest.approx(case["loss"], abs=1e-5)
    assert (out.figures["kl"] / n).item() == pytest.approx(case["kl"], abs=1e-5)
    tags = torch.tensor(case["kto_tags"])
    ratio_rewards = torch.zeros(n)
    ratio_rewards[tags] = t(case["chosen_rewards"])
    ratio_rewards[~tags] = t(case["rejected_rewards"])
    signed = torch.where(tags, ratio_rewards, -ratio_rewards)
    assert out.figures["rewards_margin"].item() == pytest.approx(signed.sum().item(), abs=1e-5)
    assert out.figures["rewards_accuracy"].item() == (signed > 0).sum().item()
    (out.total / n).backward()
    assert torch.allclose(policy_logits.grad, t(case["grad_policy_logits"]), atol=1e-5)


def test_kto_averages_its_kl_over_the_ranks_in_training_and_not_in_eval(monkeypatch):
    """As TRL gathers it: each rank's KL estimate (before the clamp at 0) averaged over the
    ranks; in eval, where ranks see unequal numbers of batches, the rank's own."""
    import ftui.runner.distributed as distributed
    from ftui.runner.stages.kto import FeedbackBatch

    case = LOSSES["kto"][0]
    other_rank_kl = 0.75
    monkeypatch.setattr(distributed.dist, "is_initialized", lambda: True)
    monkeypatch.setattr(distributed.dist, "get_world_size", lambda: 2)
    monkeypatch.setattr(distributed.dist, "all_reduce", lambda total: total.add_(other_rank_kl))

    def kl_of(model_mode: str) -> float:
        stage = stage_for("kto", settings(case))
        n = len(case["kto_tags"])
        ids = torch.cat([torch.tensor(case["input_ids"]), torch.tensor(case["kl_input_ids"])])
        labels = torch.cat([torch.tensor(case["labels"]), torch.tensor(case["kl_labels"])])
        mask = torch.cat([torch.tensor(case["attention_mask"]), torch.tensor(case["kl_attention_mask"])])
        rows = {tuple(r.tolist()): l for r, l in zip(ids, torch.cat([t(case["policy_logits"]), t(case["policy_kl_logits"])]))}
        ref_rows = {tuple(r.tolist()): l for r, l in zip(ids, torch.cat([t(case["reference_logits"]), t(case["reference_kl_logits"])]))}
        stage.reference = FixedReference(Fixed(ref_rows))
        model = Fixed(rows).train(model_mode == "train")
        batch = FeedbackBatch(ids, labels, mask, None, 0, 0, n, desirable=torch.tensor(case["kto_tags"]))
        return (stage.loss(model, batch, lambda: torch.autocast("cpu", enabled=False)).figures["kl"] / n).item()

    own = kl_of("eval")
    assert own == pytest.approx(case["kl"], abs=1e-5)
    assert kl_of("train") == pytest.approx(max(0.0, (own + other_rank_kl) / 2), abs=1e-5)


@pytest.mark.parametrize("case", LOSSES["rm"], ids=lambda c: c["name"])
def test_reward_model_loss_and_accuracy_match_llamafactory(case):
    values = t(case["values"]).unsqueeze(-1)
    chosen, rejected = pair_scores(values, torch.tensor(case["attention_mask"]))
    assert torch.allclose(chosen, t(case["chosen_scores"]).reshape(-1), atol=1e-6)
    assert torch.allclose(rejected, t(case["rejected_scores"]).reshape(-1), atol=1e-6)
    loss = -torch.nn.functional.logsigmoid(chosen - rejected)
    assert loss.mean().item() == pytest.approx(case["loss"], abs=1e-5)
    assert (chosen > rejected).float().mean().item() == pytest.approx(case["accuracy"], abs=1e-6)


def test_sequence_logps_count_only_labelled_next_tokens():
    logits = torch.zeros(1, 4, 5)
    labels = torch.tensor([[-100, 2, 3, -100]])
    sums, n = sequence_logps(logits, labels)
    assert n.tolist() == [2] and sums.item() == pytest.approx(2 * -torch.log(torch.tensor(5.0)).item())
