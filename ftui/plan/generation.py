"""What a stage that generates its own training data (grpo, ppo: ``PlannerTerms.generation``)
adds to the memory plan. Between optimizer steps each process samples completions with the
policy (``model.generate`` under no_grad, with the KV cache) for its share of the generation
batch, all at once, and keeps them as a rollout buffer for the micro batches that train on them.

- The KV cache: 2 (K and V) x layers x kv_heads x head_dim x bytes of the compute type x (the
  prompt's length + max_completion_length) x the completions generated at once.
- The prefill's working set (one layer's hidden states and MLP at a time over every prompt
  token) and the sampling's fp32 logits and probabilities of the last position.
- ZeRO-3 gathers the whole model for the generation (as TRL does): the full weights in the
  compute type beside the process's shard.
- The rollout buffer: the ids, masks and old / reference log-probabilities of the completions,
  kept while they train (small).

The KV cache, prefill and sampling live while no activations do (the rollout runs before the
step's forwards, after the gradients of the last step were freed): the planner counts the
larger of the two phases (``Estimate.generation``). torch-free: the app side plans with it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from ftui.plan.model_shape import ModelShape


@dataclass(frozen=True)
class Rollout:
    """One process's generation: ``completions`` sampled at once, each a prompt of at most
    ``prompt_len`` tokens (cutoff_len) and at most ``completion_len`` new ones."""

    completions: int
    prompt_len: int
    completion_len: int

    @property
    def row_len(self) -> int:
        return self.prompt_len + self.completion_len


def rollout_of(options: Mapping[str, Any], *, micro_batch: int, seq_len: int, gradient_accumulation_steps: int,
               world_size: int) -> Rollout:
    """A process's rollout from the stage's options (grpo's ``max_completion_length``, ppo's
    ``max_new_tokens``; ``num_generations`` and ``steps_per_generation`` where the stage has them,
    TRL's names; ppo's ``ppo_buffer_size``): per_device_train_batch_size completions for each of
    steps_per_generation micro batches (0 or absent: gradient accumulation's) times
    ppo_buffer_size, and at least its share of one group, since a generation batch holds whole groups."""
    steps = int(options.get("steps_per_generation") or 0) or max(1, gradient_accumulation_steps)
    steps *= max(1, int(options.get("ppo_buffer_size") or 1))
    group_share = -(-int(options.get("num_generations") or 1) // max(1, world_size))
    return Rollout(completions=max(micro_batch * steps, group_share), prompt_len=seq_len,
                   completion_len=int(options.get("max_completion_length") or options.get("max_new_tokens") or 0))


def kv_cache_bytes(shape: ModelShape, rollout: Rollout, act: int) -> float:
    return 2.0 * shape.layers * shape.kv_heads * shape.head_dim * act * rollout.row_len * rollout.completions


def generation_bytes(shape: ModelShape, rollout: Rollout, *, act: int, gathered_weights: float) -> float:
    """The rollout phase's peak beyond what persists: the KV cache, the prefill's one layer over
    every prompt token, the last position's fp32 logits and probabilities, and (ZeRO-3) the
    gathered full model."""
    prefill = rollout.completions * rollout.prompt_len * (4 * shape.hidden + 2 * shape.intermediate) * act
    sampling = rollout.completions * shape.vocab * (act + 4 + 4)
    return kv_cache_bytes(shape, rollout, act) + prefill + sampling + gathered_weights


def buffer_bytes(rollout: Rollout) -> float:
    """The rollout buffer: int64 ids and masks over each row, fp32 old and reference log-probabilities
    and the advantage over each completion."""
    return rollout.completions * (rollout.row_len * 16 + rollout.completion_len * 8 + 4)
