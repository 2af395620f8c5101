"""Proximal policy optimisation (``stage: ppo``): LLaMA-Factory 0.9.5's PPO (TRL 0.9.6's step
maths, ``ftui.runner.ppo_math``) on ftui's loop. The examples are the dataset's prompts (as
grpo encodes them); the micro batches are the mini batches of the rollout batches the stage
makes as it trains (``ftui.runner.ppo_rollout``); the loss of a micro batch is TRL's clipped
policy loss plus vf_coef x its clipped value loss, one loss unit (TRL's mean per mini batch).

The policy carries a fresh value head (TRL's) on its output projection
(``ftui.runner.reward.install_policy_value_head``): one forward gives the log-probabilities
and the values. final/ saves it beside the model or adapter as ``value_head.safetensors``
(``v_head.summary.*``, LLaMA-Factory's layout). The reward model is the rm run's
(``reward_model``), frozen, scoring the token ids of prompt + answer; the reference model is
the policy with its LoRA adapter off, or a frozen copy (full, freeze).

Figures: the rollout batches' (reward: the reward model's mean raw score, reward_std, kl,
kl_coef, completion_length, clipped_ratio) through :meth:`window_figures`; the loss's
(policy_loss, value_loss, clipfrac, vf_clipfrac, approx_kl) per mini batch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn

from ftui.i18n import _
from ftui.runner.data import DataFormatError
from ftui.runner.loss import micro_batch_token_logps
from ftui.runner.model import trained_dtype
from ftui.runner.ppo_math import VF_COEF, ppo_losses
from ftui.runner.ppo_rollout import PPORollouts, ppo_sampling
from ftui.runner.rollout import all_gather_tensor, buffer_rows, generation_seed, sample_completions
from ftui.runner.reward import VALUE_HEAD_FILE, install_policy_value_head, last_token_values, split_value_head, taken_values
from ftui.runner.stages.base import BatchSource, GeneratedBatches, MicroLoss
from ftui.runner.stages.grpo import GRPOStage, stop_ids_of
from ftui.stages.ppo import LOSS_FIGURES


class PPOStage(GRPOStage):
    name = "ppo"

    def __init__(self, cfg: Any, tokenizer: Any):
        super().__init__(cfg, tokenizer)
        self.value_proj: nn.Module | None = None
        self.reward_model: nn.Module | None = None
        self.ppo: PPORollouts | None = None
        self.resumed: dict[str, Any] = {}

    @property
    def figures(self) -> tuple[str, ...]:
        return LOSS_FIGURES

    def parse_saved(self, table: Any, path: str) -> list[Any]:
        raise DataFormatError(_("stage ppo encodes its prompts as it starts, which tokenized_path does not hold; remove "
                                "tokenized_path"))

    def steps_per_epoch(self, examples: int, batches_per_epoch: int, accum: int, world: int) -> int:
        """An epoch is every prompt once: its rollout batches, each trained ppo_buffer_size x
        ppo_epochs optimizer steps."""
        o = self.options
        batches = examples // (self.cfg.per_device_train_batch_size * accum * o.ppo_buffer_size * world)
        return batches * o.ppo_buffer_size * o.ppo_epochs

    # --- model
    def prepare_model(self, model: nn.Module) -> None:
        super().prepare_model(model)
        self.value_proj = install_policy_value_head(model, dtype=trained_dtype(model))

    def final_extras(self, state_dict: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], dict[str, dict[str, torch.Tensor]]]:
        model, head = split_value_head(state_dict)
        return model, {VALUE_HEAD_FILE: head}

    def batches(self, t: Any, start: int) -> BatchSource:
        from ftui.rundir.rollouts import RolloutWriter

        writer = RolloutWriter(t.run_dir) if t.info.is_main else None
        log = (lambda message: t.writer.write("log", level="warning", message=message)) if t.writer is not None else None
        self.reward_model = self.load_reward_model(t.engine)
        self.ppo = PPORollouts(self.cfg, self.options, t.engine, self, t.data.train,
                               stop_ids_of(self.cfg, self.tokenizer, t.engine.unwrap()), self.pad_id, writer, log)
        self.ppo.restore(self.resumed)
        return GeneratedBatches(self.ppo.micro_batch, t.device, start)

    def load_reward_model(self, engine: Any) -> nn.Module:
        """The rm run's model with its value head, frozen on this rank's device (RewardError
        when it cannot be loaded, or reads other token ids than the policy's tokenizer)."""
        from ftui.runner.rewards import RewardError, RewardModelScorer, score_dtype

        with torch.random.fork_rng(devices=[]):  # its value head's init leaves the run's RNG (resumed exactly) as it was
            scorer = RewardModelScorer(Path(str(self.options.reward_model)).expanduser(), engine.device, score_dtype(self.cfg))
        if len(scorer.tokenizer) != len(self.tokenizer):
            raise RewardError(_("reward model {run} has a tokenizer of {theirs} tokens, the policy's has {ours}: ppo scores "
                                "the policy's token ids (as LLaMA-Factory), so train the rm run on the same model").format(
                run=self.options.reward_model, theirs=len(scorer.tokenizer), ours=len(self.tokenizer)))
        return scorer.model

    def checkpoint_state(self) -> dict[str, Any]:
        return self.ppo.state() if self.ppo is not None else dict(self.resumed)

    def resume_state(self, state: dict[str, Any]) -> None:
        self.resumed = dict(state)

    def window_figures(self) -> dict[str, float]:
        return self.ppo.window_figures() if self.ppo is not None else {}

    # --- the forwards a rollout batch needs (PPORollouts calls them, without gradients)
    @torch.no_grad()
    def score(self, ids: torch.Tensor, attention: torch.Tensor) -> torch.Tensor:
        """The reward model's value at each row's last real token (LF's get_rewards)."""
        with self.engine.autocast():
            values = self.reward_model(input_ids=ids, attention_mask=attention, use_cache=False).logits
        return last_token_values(values, attention)

    @torch.no_grad()
    def policy_forward(self, inputs: dict[str, torch.Tensor], labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The policy's per-position log-probabilities (no temperature, as LF) and values."""
        logps, _entropy = micro_batch_token_logps(self.engine.model, self.head, inputs, labels, self.engine.autocast)
        return logps, taken_values(self.value_proj)[:, :-1]

    @torch.no_grad()
    def reference_logps(self, inputs: dict[str, torch.Tensor], labels: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        ref, autocast = self.reference, self.engine.autocast
        if ref.copy is not None:
            return micro_batch_token_logps(ref.copy, ref.head, inputs, labels, autocast)[0]
        with ref.engine.unwrap().disable_adapter():
            logps = micro_batch_token_logps(self.engine.model, self.head, inputs, labels, autocast)[0]
        taken_values(self.value_proj)  # the adapter-off forward's values: not the policy's
        return logps

    # --- the loss of one mini batch
    def loss(self, model: nn.Module, batch: Any, autocast: Callable) -> MicroLoss:
        logps, _entropy = micro_batch_token_logps(model, self.head, batch.model_inputs(), batch.labels, autocast)
        values = taken_values(self.value_proj)[:, :-1]
        pg, vf, figures = ppo_losses(batch.old_logps, batch.old_values, values, logps, batch.mask, batch.advantages,
                                     batch.returns)
        device = pg.device
        out = {"policy_loss": pg.detach(), "value_loss": vf.detach() / VF_COEF, "clipfrac": figures["clipfrac"],
               "vf_clipfrac": figures["vf_clipfrac"], "approx_kl": figures["approxkl"]}
        return MicroLoss(pg + vf, {k: torch.as_tensor(v, dtype=torch.float32, device=device) for k, v in out.items()})

    @torch.no_grad()
    def evaluate(self, engine: Any, examples: list[Any], collator: Callable, beat: Callable[[], None]) -> dict[str, Any]:
        """``ftui eval`` of a ppo run (training does not evaluate: LLaMA-Factory's PPO does not):
        the reward model's mean score of one sampled answer to each of this rank's eval prompts
        (collective: every rank calls it, with shares that may differ by one)."""
        self.engine = engine
        if self.reward_model is None:
            self.reward_model = self.load_reward_model(engine)
        o, bs, world = self.options, self.cfg.per_device_eval_batch_size, engine.info.world_size
        count = torch.tensor([float(len(examples))], device=engine.device)
        rounds = int(all_gather_tensor(count, world).max().item())  # every rank generates as often: the collectives match
        sums = torch.zeros(2, dtype=torch.float64)
        stops = stop_ids_of(self.cfg, self.tokenizer, engine.unwrap())
        for k, start in enumerate(range(0, max(rounds, 1), bs)):
            part = examples[start:start + bs]
            prompts = [e.input_ids for e in part] or [examples[0].input_ids if examples else [self.pad_id]]
            completions, _truncated = sample_completions(
                engine, prompts, pad=self.pad_id, stop_ids=stops, synced=False,
                seed=generation_seed(self.cfg.seed, -1 - k, engine.info.rank),  # seeded apart from training's
                sampling=ppo_sampling(o))
            if part:
                ids, attention, _labels = buffer_rows(prompts, completions, self.pad_id)
                scores = self.score(ids.to(engine.device), attention.to(engine.device)).double().cpu()
                sums += torch.tensor([scores.sum().item(), float(len(part))], dtype=torch.float64)
            beat()
        total = engine.all_reduce_sum(sums.to(engine.device)).tolist()
        return {"eval_loss": None, "eval_reward": total[0] / total[1] if total[1] else None}
