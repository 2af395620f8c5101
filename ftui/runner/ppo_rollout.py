"""PPO's rollout batches (``stage: ppo``), made a batch at a time as LLaMA-Factory 0.9.5 makes
them and TRL 0.9.6's ``PPOTrainer.step`` trains on them, laid out as the shared loop's micro
batches (one loop step = one optimizer step):

1. each rank takes per_device_train_batch_size x gradient_accumulation_steps x ppo_buffer_size
   prompts of the run's seeded prompt stream (``ftui.runner.rollout.prompt_order``) and samples
   one answer to each (LF's generating keys, a generation-seeded RNG);
2. the rm run's reward model scores prompt + answer (the value at the last token, LF's
   get_rewards); ``ppo_score_norm``: by the running moments of every rank's scores;
3. the policy's log-probabilities (no temperature, LF's batched_forward_pass) and values, and
   the reference model's log-probabilities, in mini batches of per_device_train_batch_size;
4. per-token rewards with the k1 KL penalty (the adaptive coefficient), GAE, whitened
   advantages over the rank's batch (``ftui.runner.ppo_math``); the KL controller then moves
   with the batch's KL (every rank's), as TRL does at the end of its step;
5. ``ppo_epochs`` passes over the batch, each a seeded permutation cut into mini batches of
   per_device_train_batch_size: the loop's micro batches, gradient_accumulation_steps of them
   one optimizer step.

The KL coefficient and the running score moments are the stage's state across batches
(``state`` / ``restore``: stored in checkpoints). A run resumed at a batch boundary makes the
next batch exactly as the uninterrupted run; resumed inside one, the batch is made again with
the resumed weights (and the run says so).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from ftui.i18n import _
from ftui.runner.data import IGNORE
from ftui.runner.ppo_math import AdaptiveKLController, RunningMoments, gae, masked_mean, sequence_kl, token_rewards
from ftui.runner.rollout import (PromptExample, all_gather_objects, all_gather_tensor, buffer_rows, generation_seed, prompt_order,
                                 sample_completions)


@dataclass
class PPOBatch:
    """One mini batch of the buffer: rows right-padded, ``labels`` the answers' tokens; per
    next-token position (rows, T-1): ``mask``, the policy's log-probabilities and values when
    the batch was made, the advantages and returns. One loss unit (TRL's mean per mini batch)."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    labels: torch.Tensor
    mask: torch.Tensor
    old_logps: torch.Tensor
    old_values: torch.Tensor
    advantages: torch.Tensor
    returns: torch.Tensor
    loss_tokens: float = 1.0
    real_tokens: int = 0
    trainable_tokens: int = 0

    def to(self, device: Any) -> "PPOBatch":
        return PPOBatch(**{k: (v.to(device) if torch.is_tensor(v) else v) for k, v in vars(self).items()})

    def model_inputs(self) -> dict[str, torch.Tensor]:
        return {"input_ids": self.input_ids, "attention_mask": self.attention_mask}

    def rows(self, index: torch.Tensor) -> "PPOBatch":
        """The rows ``index``, cut to their longest (right padding changes no earlier position)."""
        attention = self.attention_mask[index]
        width = int(attention.sum(1).max())
        cut = {k: getattr(self, k)[index][:, :width] for k in ("input_ids", "attention_mask", "labels")}
        steps = {k: getattr(self, k)[index][:, :width - 1]
                 for k in ("mask", "old_logps", "old_values", "advantages", "returns")}
        return PPOBatch(**cut, **steps, real_tokens=int(attention.sum()), trainable_tokens=int(steps["mask"].sum()))


def ppo_sampling(options: Any) -> dict[str, Any]:
    """``generate``'s sampling arguments from LLaMA-Factory's generating keys of a ppo run: its
    rollouts and ``ftui eval``'s answers sample alike."""
    o = options
    return dict(do_sample=o.do_sample, temperature=o.temperature, top_p=o.top_p, top_k=o.top_k,
                repetition_penalty=o.repetition_penalty, max_new_tokens=o.max_new_tokens)


class PPORollouts:
    """The micro batches of a ppo run (see the module). ``stage`` gives the forwards:
    ``policy_forward(batch) -> (logps, values)``, ``reference_logps(batch)`` and
    ``score(ids, attention) -> scores``; ``tokenizer`` decodes the answers."""

    def __init__(self, cfg: Any, options: Any, engine: Any, stage: Any, prompts: list[PromptExample], stop_ids: list[int],
                 pad: int, writer: Any = None, log: Any = None):
        self.cfg, self.o, self.engine, self.stage = cfg, options, engine, stage
        self.prompts, self.stop_ids, self.pad, self.writer, self.log = prompts, stop_ids, pad, writer, log
        self.rank, self.world = engine.info.rank, engine.info.world_size
        self.bs, self.accum = cfg.per_device_train_batch_size, cfg.gradient_accumulation_steps
        self.local = self.bs * self.accum * int(options.ppo_buffer_size)  # prompts this rank answers per batch
        self.minis = self.accum * int(options.ppo_buffer_size)  # mini batches per epoch
        self.per_batch = self.minis * int(options.ppo_epochs)  # micro batches one rollout batch serves
        strategy = getattr(getattr(getattr(engine, "cfg", None), "engine_spec", None), "strategy", "")
        self.synced = self.world > 1 and (strategy == "fsdp" or getattr(engine, "stage", None) == 3)
        self.kl = AdaptiveKLController(target=float(options.ppo_target))
        self.moments = RunningMoments()
        self.number: int | None = None  # the rollout batch in the buffer
        self.buffer: PPOBatch | None = None
        self.orders: list[torch.Tensor] = []
        self.window: list[dict[str, float]] = []

    # --- the stage's state across batches (checkpoints)
    def state(self) -> dict[str, Any]:
        m = self.moments
        return {"kl_coef": self.kl.value, "score_mean": float(m.mean), "score_var": float(m.var), "score_std": float(m.std),
                "score_count": m.count}

    def restore(self, state: dict[str, Any]) -> None:
        if not state:
            return
        self.kl.value = float(state["kl_coef"])
        as32 = lambda key: torch.tensor(float(state[key]), dtype=torch.float32)  # noqa: E731 - TRL keeps them fp32
        self.moments = RunningMoments(as32("score_mean"), as32("score_var"), as32("score_std"), float(state["score_count"]))

    # --- the loop's micro batches
    def micro_batch(self, index: int) -> PPOBatch:
        number, k = divmod(index, self.per_batch)
        if number != self.number:
            if self.number is None and k and self.log is not None:
                self.log(_("resumed inside a rollout batch: batch {n} is made again with the resumed weights, so its "
                           "rollouts differ from the uninterrupted run's").format(n=number))
            self.make(number)
            self.number = number
        epoch, j = divmod(k, self.minis)
        return self.buffer.rows(self.orders[epoch][j * self.bs:(j + 1) * self.bs])

    def make(self, number: int) -> None:
        o = self.o
        everyone = self.local * self.world
        order = prompt_order(len(self.prompts), self.cfg.seed, number * everyone, everyone)
        mine = order[self.rank * self.local:(self.rank + 1) * self.local]
        examples = [self.prompts[p] for p in mine]
        completions, truncated = sample_completions(
            self.engine, [e.input_ids for e in examples], pad=self.pad, stop_ids=self.stop_ids, synced=self.synced,
            seed=generation_seed(self.cfg.seed, number, self.rank),
            sampling=ppo_sampling(o))
        ids, attention, labels = buffer_rows([e.input_ids for e in examples], completions, self.pad)
        mask = (labels[:, 1:] != IGNORE).float()
        raw, logps, values, ref = self.forwards(ids, attention, labels)
        device = self.engine.device
        lengths = torch.tensor([[len(c), t] for c, t in zip(completions, truncated)], dtype=torch.float32)
        gathered = all_gather_tensor(torch.cat([raw.unsqueeze(1), lengths], 1).to(device), self.world).cpu()
        scores_all = gathered[:, 0]
        local = slice(self.rank * self.local, (self.rank + 1) * self.local)
        scores = self.moments.normalise(scores_all)[local] if o.ppo_score_norm else raw
        kl_coef = self.kl.value
        rewards, _non_score, kls = token_rewards(scores, logps, ref, mask, kl_coef)
        values, advantages, returns = gae(values, rewards, mask, whiten_rewards=o.ppo_whiten_rewards)
        row_kls = all_gather_tensor((kls * mask).sum(-1).to(device), self.world).cpu()
        batch_kl = sequence_kl(row_kls.unsqueeze(1), torch.ones_like(row_kls).unsqueeze(1)).item()
        self.kl.update(batch_kl, everyone)  # TRL: after the step, with the batch's KL over every rank
        self.buffer = PPOBatch(ids, attention, labels, mask, logps, values, advantages, returns)
        self.orders = [torch.randperm(self.local, generator=torch.Generator().manual_seed(
            generation_seed(self.cfg.seed, number, self.rank) + 1 + epoch)) for epoch in range(int(o.ppo_epochs))]
        self.window.append({"reward": scores_all.mean().item(), "reward_std": scores_all.std().item() if everyone > 1 else 0.0,
                            "kl": batch_kl, "kl_coef": kl_coef, "completion_length": gathered[:, 1].mean().item(),
                            "clipped_ratio": gathered[:, 2].mean().item()})
        self.write_rows(number, examples, completions, truncated, raw, advantages, mask)

    @torch.no_grad()
    def forwards(self, ids: torch.Tensor, attention: torch.Tensor, labels: torch.Tensor
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """The reward model's scores (raw), the policy's log-probabilities and values and the
        reference's log-probabilities, in mini batches of per_device_train_batch_size (fp32, CPU)."""
        device = self.engine.device
        parts: list[list[torch.Tensor]] = [[], [], [], []]
        for at in range(0, ids.size(0), self.bs):
            rows = slice(at, at + self.bs)
            on = {"input_ids": ids[rows].to(device), "attention_mask": attention[rows].to(device)}
            parts[0].append(self.stage.score(on["input_ids"], on["attention_mask"]).float().cpu())
            logps, values = self.stage.policy_forward(on, labels[rows].to(device))
            parts[1].append(logps.float().cpu())
            parts[2].append(values.float().cpu())
            parts[3].append(self.stage.reference_logps(on, labels[rows].to(device)).float().cpu())
        return tuple(torch.cat(p) for p in parts)  # type: ignore[return-value]

    def window_figures(self) -> dict[str, float]:
        """The means of the rollout batches' figures since the last call."""
        window, self.window = self.window, []
        names = dict.fromkeys(k for f in window for k in f)
        return {k: sum(f[k] for f in window if k in f) / sum(1 for f in window if k in f) for k in names}

    def write_rows(self, number: int, examples: list[PromptExample], completions: list[list[int]],
                   truncated: list[bool], scores: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor) -> None:
        """One rollouts-file row per answer (rank 0 writes every rank's): its reward model score
        and its mean advantage; ``step`` the optimizer step that first trains on it."""
        first = torch.empty(self.local, dtype=torch.long)
        first[self.orders[0]] = torch.arange(self.local) // self.bs  # each row's mini batch in the first epoch
        texts = [self.stage.tokenizer.decode(c, skip_special_tokens=True) for c in completions]
        rows = []
        for i, e in enumerate(examples):
            score = scores[i].item()
            advantage = masked_mean(advantages[i], mask[i]).item()
            rows.append({"step": (number * self.per_batch + int(first[i])) // self.accum + 1, "generation": number,
                         "group": self.rank * self.local + i, "sample": 0, "prompt": e.text, "completion": texts[i],
                         "reference": e.record.get("reference"), "rewards": {"reward_model": score}, "reward": score,
                         "advantage": advantage if math.isfinite(advantage) else 0.0, "length": len(completions[i]),
                         "truncated": truncated[i]})
        parts = all_gather_objects(rows, self.world)
        if self.writer is not None:
            self.writer.write([row for part in parts for row in part])
