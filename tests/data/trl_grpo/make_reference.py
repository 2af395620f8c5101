"""Regenerates losses.json and advantages.json: what TRL 1.16's GRPO computes on one fixed batch,
so that ftui's GRPO maths (ftui/runner/grpo_loss.py) can be checked against TRL without TRL being
a dependency. README.md here describes the JSON layout.

Run it with TRL 1.16.0's wheel unpacked over LLaMA-Factory's venv (never ftui's venv):

    pip download trl==1.16.0 --no-deps -d /tmp/trl1 && unzip -q -o /tmp/trl1/*.whl -d /tmp/trl1/x
    PYTHONPATH=/tmp/trl1/x /work/lfvenv/bin/python tests/data/trl_grpo/make_reference.py

losses.json: TRL's own ``GRPOTrainer._compute_loss`` (the trainer made without __init__: a
namespace holding the attributes the method reads), its per-token log-probabilities taken from a
leaf tensor of logits (``log_softmax(logits / temperature)`` at the completion ids, as TRL's
``_get_per_token_logps_and_entropies`` does after the forward), so the loss, ``logits.grad`` and
TRL's logged metrics are TRL's. Single process, one micro batch, gradient accumulation 1,
steps_per_generation 1, use_bias_correction_kl False (ftui implements only that variant).

advantages.json: TRL computes advantages inline in ``_generate_and_score_completions`` (not
callable alone), so these values come from a TRANSCRIPTION of TRL 1.16's code
(trl/trainer/grpo_trainer.py 2755-2803, multi_objective_aggregation "sum_then_normalize"), which
calls TRL's own ``nanstd`` (trl.trainer.utils); the transcription is ``transcribed_advantages``.
"""

from __future__ import annotations

import collections
import contextlib
import json
import math
import types
from pathlib import Path

import torch
import trl
from trl.trainer.grpo_trainer import GRPOTrainer
from trl.trainer.utils import nanstd

HERE = Path(__file__).resolve().parent
B, P, T, V = 6, 3, 6, 13
TEMPERATURE, EPSILON, EPSILON_HIGH, MAX_COMPLETION_LENGTH = 0.7, 0.2, 0.28, 8


class Accelerator:
    """The single-process accelerator the loss reads: gather/reduce are identities."""

    num_processes = 1
    process_index = 0

    def gather(self, x):
        return x.reshape(-1) if torch.is_tensor(x) else x

    def reduce(self, x, reduction="sum"):
        return x

    def autocast(self):
        return contextlib.nullcontext()


def fixed_batch() -> dict:
    torch.manual_seed(43)
    logits = torch.randn(B, T, V, dtype=torch.float64)
    completion_ids = torch.randint(0, V, (B, T))
    # row 3 hit max length and mask_truncated_completions zeroed it; the others end at their EOS
    lengths = [6, 4, 5, 0, 2, 6]
    mask = torch.tensor([[1.0] * n + [0.0] * (T - n) for n in lengths], dtype=torch.float64)
    advantages = torch.tensor([1.1, -0.7, 0.4, 0.9, -1.3, 0.0], dtype=torch.float64)
    logps = torch.log_softmax(logits / TEMPERATURE, -1).gather(-1, completion_ids.unsqueeze(-1)).squeeze(-1)
    # old log-probs near the current ones: some ratios inside the clip range, some outside either side
    old_logps = logps + torch.randn(B, T, dtype=torch.float64) * 0.3
    ref_logps = logps + torch.randn(B, T, dtype=torch.float64) * 0.2
    return dict(logits=logits, completion_ids=completion_ids, mask=mask, advantages=advantages,
                old_logps=old_logps, ref_logps=ref_logps)


def trl_loss(batch: dict, *, loss_type: str, beta: float, old_given: bool, delta: float | None) -> dict:
    logits = batch["logits"].clone().requires_grad_(True)
    ids = batch["completion_ids"]

    def logps_and_entropies(self, model, input_ids, attention_mask, logits_to_keep, *a, compute_entropy=False, **k):
        logp_all = torch.log_softmax(logits / TEMPERATURE, -1)
        logps = logp_all.gather(-1, ids.unsqueeze(-1)).squeeze(-1)
        entropies = -(logp_all.exp() * logp_all).sum(-1).detach() if compute_entropy else None
        return logps, entropies, None

    trainer = types.SimpleNamespace(
        top_entropy_quantile=1.0, beta=beta, importance_sampling_level="token", epsilon_low=EPSILON,
        epsilon_high=EPSILON_HIGH, loss_type=loss_type, use_vllm=False, vllm_importance_sampling_correction=False,
        args=types.SimpleNamespace(delta=delta, use_bias_correction_kl=False, steps_per_generation=1,
                                   gradient_accumulation_steps=1),
        current_gradient_accumulation_steps=1, max_completion_length=MAX_COMPLETION_LENGTH, accelerator=Accelerator(),
        model=types.SimpleNamespace(training=True), _metrics={"train": collections.defaultdict(list)},
        off_policy_mask_threshold=None, aux_loss_enabled=False, _entropy_bonus_enabled=False,
        use_adaptive_entropy=False, entropy_coef=0.0)
    trainer._get_per_token_logps_and_entropies = types.MethodType(logps_and_entropies, trainer)
    mask = batch["mask"].long()
    inputs = dict(prompt_ids=torch.zeros(B, P, dtype=torch.long), prompt_mask=torch.ones(B, P, dtype=torch.long),
                  completion_ids=ids, completion_mask=mask, advantages=batch["advantages"],
                  old_per_token_logps=batch["old_logps"] if old_given else None,
                  ref_per_token_logps=batch["ref_logps"] if beta != 0 else None,
                  num_items_in_batch=mask.sum())
    loss = GRPOTrainer._compute_loss(trainer, None, inputs)
    loss.backward()
    metrics = {k: v[-1] for k, v in trainer._metrics["train"].items()}
    return dict(loss_type=loss_type, beta=beta, old_logps_given=old_given, delta=delta, loss=loss.item(),
                grad_logits=logits.grad.tolist(), metrics=metrics)


def transcribed_advantages(rewards_per_func: torch.Tensor, weights: torch.Tensor, group: int, scale: str) -> dict:
    """TRL 1.16 grpo_trainer.py 2755-2803 ("sum_then_normalize"), transcribed line for line."""
    unscorable = torch.isnan(rewards_per_func).all(dim=1)
    rewards = (rewards_per_func * weights.unsqueeze(0)).nansum(dim=1)
    summed = rewards.clone()
    rewards[unscorable] = torch.nan
    mean = torch.nanmean(rewards.view(-1, group), dim=1).repeat_interleave(group, dim=0)
    if scale in ("group", "none"):
        std = nanstd(rewards.view(-1, group), dim=1).repeat_interleave(group, dim=0)
    else:
        std = nanstd(rewards).expand_as(rewards)
    advantages = rewards - mean
    if scale != "none":
        advantages = advantages / (std + 1e-4)
    zero_std = torch.isclose(std, torch.zeros_like(std))
    advantages = torch.nan_to_num(advantages, nan=0.0)
    return dict(advantages=advantages.tolist(), rewards=summed.tolist(), zero_std=zero_std.tolist())


def nan_to_none(rows):
    return [[None if math.isnan(x) else x for x in row] for row in rows]


def advantage_cases() -> list[dict]:
    nan = float("nan")
    # 4 prompts x group 3, two functions (weights 1 and 0.5): group 1 has equal rewards (std 0);
    # row 7 has every function None (left out of its group); row 10 has one None (nansum)
    per_func = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0],
                             [0.5, 0.0], [0.5, 0.0], [0.5, 0.0],
                             [0.0, 0.2], [nan, nan], [1.0, 0.8],
                             [0.3, 0.9], [nan, 0.4], [0.7, 0.1]], dtype=torch.float64)
    cases = []
    for weights in ([1.0, 0.5], [1.0, 1.0]):
        w = torch.tensor(weights, dtype=torch.float64)
        for scale in ("group", "batch", "none"):
            out = transcribed_advantages(per_func.clone(), w, 3, scale)
            cases.append(dict(group=3, scale_rewards=scale, weights=weights, **out))
    # one group of 6 (two processes' slices in TRL: advantages are computed on the gathered rows)
    w = torch.tensor([1.0, 0.5], dtype=torch.float64)
    cases.append(dict(group=6, scale_rewards="group", weights=[1.0, 0.5],
                      **transcribed_advantages(per_func.clone(), w, 6, "group")))
    return [dict(rewards_per_func=nan_to_none(per_func.tolist()), **c) for c in cases]


def main() -> None:
    assert trl.__version__ == "1.16.0", trl.__version__
    batch = fixed_batch()
    cases = [trl_loss(batch, loss_type=lt, beta=beta, old_given=old, delta=None)
             for lt in ("grpo", "bnpo", "dr_grpo", "dapo") for beta in (0.0, 0.04) for old in (True, False)]
    cases.append(trl_loss(batch, loss_type="dapo", beta=0.04, old_given=True, delta=1.1))
    losses = dict(trl=trl.__version__, torch=torch.__version__, temperature=TEMPERATURE, epsilon=EPSILON,
                  epsilon_high=EPSILON_HIGH, max_completion_length=MAX_COMPLETION_LENGTH,
                  use_bias_correction_kl=False, importance_sampling_level="token",
                  logits=batch["logits"].tolist(), completion_ids=batch["completion_ids"].tolist(),
                  mask=batch["mask"].tolist(), advantages=batch["advantages"].tolist(),
                  old_logps=batch["old_logps"].tolist(), ref_logps=batch["ref_logps"].tolist(), cases=cases)
    (HERE / "losses.json").write_text(json.dumps(losses, indent=1) + "\n")
    advantages = dict(trl=trl.__version__, source="transcription of TRL 1.16 grpo_trainer.py 2755-2803 "
                      "calling trl.trainer.utils.nanstd", cases=advantage_cases())
    (HERE / "advantages.json").write_text(json.dumps(advantages, indent=1) + "\n")
    for c in cases:
        print(c["loss_type"], c["beta"], c["old_logps_given"], c["delta"], round(c["loss"], 8), c["metrics"])


if __name__ == "__main__":
    main()
