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
steps_per_generation 1; use_bias_correction_kl False (TRL 0.x's KL) and True (TRL 1.16's default) cases.

advantages.json: TRL's own ``GRPOTrainer._generate_and_score_completions`` (multi_objective_aggregation
"sum_then_normalize"), the trainer again a namespace, its ``_generate`` returning fixed completions and its
``_calculate_rewards`` the fixed (gathered) rewards_per_func, so the advantages (this process's slice) and
the logged ``reward`` / ``frac_reward_zero_std`` are TRL's. Per row, ``rewards`` (the weighted nansum) and
``zero_std`` are not returned by TRL (locals of that method): they come from a TRANSCRIPTION of its lines
2755-2803 (``transcribed_advantages``, calling TRL's ``nanstd``), whose advantages are checked here to
equal TRL's own.
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


def trl_loss(batch: dict, *, loss_type: str, beta: float, old_given: bool, delta: float | None,
             bias_correction: bool = False) -> dict:
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
        args=types.SimpleNamespace(delta=delta, use_bias_correction_kl=bias_correction, steps_per_generation=1,
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
    return dict(loss_type=loss_type, beta=beta, old_logps_given=old_given, delta=delta,
                use_bias_correction_kl=bias_correction, loss=loss.item(),
                grad_logits=logits.grad.tolist(), metrics=metrics)


def transcribed_advantages(rewards_per_func: torch.Tensor, weights: torch.Tensor, group: int, scale: str) -> dict:
    """TRL 1.16 grpo_trainer.py 2755-2803 ("sum_then_normalize"), transcribed line for line: the per-row
    rewards and zero_std TRL keeps local (its advantages are checked against TRL's own call)."""
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


def trl_advantages(per_func: torch.Tensor, weights: list[float], group: int, scale: str, *, processes: int = 1,
                   rank: int = 0) -> dict:
    """TRL's own _generate_and_score_completions on a namespace: this rank's advantages and the logged
    reward metrics, from the gathered rewards_per_func of ``processes`` ranks."""
    local = per_func.shape[0] // processes
    accelerator = Accelerator()
    accelerator.num_processes, accelerator.process_index, accelerator.device = processes, rank, torch.device("cpu")
    accelerator.gather = lambda x: x  # the stub's rewards are the gathered ones already
    s = types.SimpleNamespace(
        accelerator=accelerator, model=types.SimpleNamespace(training=True, is_gradient_checkpointing=False),
        environment_factories=None, tools=None, environments=None, _tokenizer=types.SimpleNamespace(pad_token_id=0),
        pad_to_multiple_of=None, mask_truncated_completions=False, eos_token_ids=[1],
        args=types.SimpleNamespace(per_device_train_batch_size=local, gradient_checkpointing_kwargs=None,
                                   steps_per_generation=1, gradient_accumulation_steps=1),
        num_iterations=1, use_vllm=False, vllm_importance_sampling_correction=False, beta=0.0, _is_vlm=False,
        num_generations=group, num_generations_eval=group, multi_objective_aggregation="sum_then_normalize",
        scale_rewards=scale, reward_weights=torch.tensor(weights), reward_func_names=["f1", "f2"],
        _metrics={"train": collections.defaultdict(list)},
        _logs={"prompt": [], "completion": [], "rewards": collections.defaultdict(list), "advantages": [],
               "extra": collections.defaultdict(list), "images": []},
        _pending_extra_logs={}, _pending_metrics={}, log_multimodal=False)
    s._generate = lambda prompts: ([[5, 6]] * local, [[7, 1]] * local, None, ["c"] * local, None, {}, None, None)
    s._calculate_rewards = lambda inputs, prompts, completions, ids: per_func.clone()
    inputs = [{"prompt": f"prompt {(rank * local + i) // group}"} for i in range(local)]
    out = GRPOTrainer._generate_and_score_completions(s, inputs)
    metrics = s._metrics["train"]
    return dict(advantages=out["advantages"].tolist(), reward=metrics["reward"][-1],
                reward_std=metrics["reward_std"][-1], frac_reward_zero_std=metrics["frac_reward_zero_std"][-1])


def advantage_cases() -> list[dict]:
    nan = float("nan")
    # 4 prompts x group 3, two functions: group 1 has equal rewards (std 0); row 7 has every function
    # None (left out of its group); row 10 has one None (nansum). float32, as reward functions give them.
    per_func = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0],
                             [0.5, 0.0], [0.5, 0.0], [0.5, 0.0],
                             [0.0, 0.2], [nan, nan], [1.0, 0.8],
                             [0.3, 0.9], [nan, 0.4], [0.7, 0.1]])
    cases = []
    settings = [(w, 3, scale, 1) for w in ([1.0, 0.5], [1.0, 1.0]) for scale in ("group", "batch", "none")]
    settings += [([1.0, 0.5], 6, "group", 1), ([1.0, 0.5], 4, "group", 2), ([1.0, 0.5], 4, "batch", 2)]
    for weights, group, scale, processes in settings:
        transcribed = transcribed_advantages(per_func.clone(), torch.tensor(weights), group, scale)
        ranks = [trl_advantages(per_func, weights, group, scale, processes=processes, rank=r) for r in range(processes)]
        advantages = [a for r in ranks for a in r["advantages"]]  # the ranks' slices, in order
        assert torch.allclose(torch.tensor(advantages), torch.tensor(transcribed["advantages"]), atol=1e-6), scale
        cases.append(dict(group=group, scale_rewards=scale, weights=weights, processes=processes,
                          advantages=advantages, rewards=transcribed["rewards"], zero_std=transcribed["zero_std"],
                          **{k: ranks[0][k] for k in ("reward", "reward_std", "frac_reward_zero_std")}))
    return [dict(rewards_per_func=nan_to_none(per_func.tolist()), **c) for c in cases]


def main() -> None:
    assert trl.__version__ == "1.16.0", trl.__version__
    batch = fixed_batch()
    cases = [trl_loss(batch, loss_type=lt, beta=beta, old_given=old, delta=None)
             for lt in ("grpo", "bnpo", "dr_grpo", "dapo") for beta in (0.0, 0.04) for old in (True, False)]
    cases.append(trl_loss(batch, loss_type="dapo", beta=0.04, old_given=True, delta=1.1))
    # TRL 1.16's default: the KL term times the ratio (its value and its gradient differ from plain k3)
    cases += [trl_loss(batch, loss_type=lt, beta=0.04, old_given=old, delta=None, bias_correction=True)
              for lt in ("grpo", "bnpo", "dr_grpo", "dapo") for old in (True, False)]
    cases.append(trl_loss(batch, loss_type="dapo", beta=0.04, old_given=True, delta=1.1, bias_correction=True))
    losses = dict(trl=trl.__version__, torch=torch.__version__, temperature=TEMPERATURE, epsilon=EPSILON,
                  epsilon_high=EPSILON_HIGH, max_completion_length=MAX_COMPLETION_LENGTH,
                  importance_sampling_level="token",
                  logits=batch["logits"].tolist(), completion_ids=batch["completion_ids"].tolist(),
                  mask=batch["mask"].tolist(), advantages=batch["advantages"].tolist(),
                  old_logps=batch["old_logps"].tolist(), ref_logps=batch["ref_logps"].tolist(), cases=cases)
    (HERE / "losses.json").write_text(json.dumps(losses, indent=1) + "\n")
    advantages = dict(trl=trl.__version__, source="TRL 1.16's own GRPOTrainer._generate_and_score_completions "
                      "(advantages, reward metrics); rewards and zero_std per row: a transcription of its lines "
                      "2755-2803", cases=advantage_cases())
    (HERE / "advantages.json").write_text(json.dumps(advantages, indent=1) + "\n")
    for c in cases:
        print(c["loss_type"], c["beta"], c["old_logps_given"], c["delta"], c["use_bias_correction_kl"], round(c["loss"], 8),
              c["metrics"])


if __name__ == "__main__":
    main()
