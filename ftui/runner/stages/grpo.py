"""Group relative policy optimisation (``stage: grpo``), TRL 1.16's GRPOTrainer semantics on
ftui's loop: the examples are the dataset's prompts; the micro batches are scored rollouts the
stage generates as it trains (``ftui.runner.rollout``); the loss of a micro batch is TRL's
clipped policy-gradient loss on the completion tokens' log-probabilities under the sampling
temperature (``ftui.runner.grpo_loss``), with a k3 KL term to the reference model (the policy
with its LoRA adapter off, or a frozen copy) when ``beta`` is not 0.

Figures: the rollouts' (reward, reward_std, reward_NAME, completion_length, clipped_ratio,
frac_reward_zero_std) through :meth:`window_figures`, per completion; the loss's (kl, entropy,
clip_ratio) per loss unit. Evaluation generates ``num_generations`` completions of every eval
prompt and reports their mean reward (eval_reward, eval_reward_NAME; eval_loss null).
"""

from __future__ import annotations

import json
import math
from typing import Any, Callable

import torch
from torch import nn

from ftui.data.conversation import ConversationError
from ftui.data.records import DataFormatError, DatasetSpec, to_conversation
from ftui.i18n import _
from ftui.runner.data import Progress, TokenizedData
from ftui.runner.grpo_loss import figure_sums, grpo_loss
from ftui.runner.loss import micro_batch_token_logps
from ftui.runner.rollout import PromptExample, Rollouts, all_gather_tensor
from ftui.runner.stages.base import BatchSource, GeneratedBatches, MicroLoss, Stage
from ftui.runner.stages.preference import ComparisonEncoder, Reference
from ftui.stages.grpo import LOSS_FIGURES, steps_per_generation


def stop_ids_of(cfg: Any, tokenizer: Any, model: Any) -> list[int]:
    """Where a completion ends: EOS, the template's stop words and the model's generation_config
    EOS ids (as ftui chat stops)."""
    from ftui.presets.templates import TEMPLATES

    words = TEMPLATES[cfg.template].stop_words if cfg.template and cfg.template in TEMPLATES else ()
    listed = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    listed = listed if isinstance(listed, list) else [listed]
    return sorted({tokenizer.eos_token_id, *tokenizer.convert_tokens_to_ids(list(words)), *listed} - {None})


class GRPOStage(Stage):
    name = "grpo"

    def __init__(self, cfg: Any, tokenizer: Any):
        super().__init__(cfg, tokenizer)
        self.options = self.description.read_options(cfg)
        self.reference = Reference(cfg) if self.description.needs_reference(cfg) else None
        self.rollouts: Rollouts | None = None
        self.engine: Any = None

    @property
    def figures(self) -> tuple[str, ...]:
        # the rollouts' figures come through window_figures; kl only with a reference model (as TRL logs it)
        return tuple(f for f in LOSS_FIGURES if f != "kl" or self.reference is not None)

    # --- data: the prompts, each with its record for the reward functions
    def encode(self, loaded: list[tuple[DatasetSpec, list[dict[str, Any]]]], out: TokenizedData,
               report: Progress) -> list[PromptExample]:
        encoder = ComparisonEncoder(self.cfg, self.tokenizer)
        examples, skipped = [], 0
        for spec, records in loaded:
            for i, record in enumerate(records):
                out.records += 1
                report.tick(out.records)
                conv = to_conversation(record, spec, i)
                if conv is None:
                    skipped += 1
                    continue
                head = type(conv)(conv.turns[:-1], conv.system, conv.tools)
                try:
                    prompt, answer = encoder.encode(head, conv.turns[-1])
                except ConversationError as err:
                    raise DataFormatError(_("dataset {name} record {i}: {error}").format(name=repr(spec.name), i=i, error=err)) from None
                ids = self.cut_prompt(prompt, answer)
                if len(ids) < len(prompt):
                    out.truncated += 1
                raw = {k: v for k, v in record.items() if isinstance(k, str)}
                columns = json.loads(json.dumps(raw, default=str))  # plain values for the user's functions
                examples.append(PromptExample(ids, self.tokenizer.decode(ids),
                                              {**columns, "reference": conv.turns[-1].get("content"), "record": i,
                                               "dataset": spec.name}))
        why = _("{n} records were skipped: their turns do not alternate user and assistant, or they do not end with "
                "the assistant's answer (grpo's prompt is the conversation before it, the answer its reference)").format(n=skipped)
        if not examples:
            raise DataFormatError(_("no record of the dataset has a prompt to generate from ({n} records)").format(n=out.records)
                                  + ("; " + why if skipped else ""))
        if skipped:
            out.warnings.append(why)
        if out.truncated:
            out.warnings.append(_("{n} prompts were longer than cutoff_len={cutoff_len}: their start was cut, their end "
                                  "(the question and the assistant's header) kept").format(
                n=out.truncated, cutoff_len=self.cfg.cutoff_len))
        return examples

    def cut_prompt(self, prompt: list[int], answer: list[int]) -> list[int]:
        """The prompt within cutoff_len: the reference answer is not in the sequence the policy
        generates from, so it takes no share of the budget (a long reference solution does not
        cut a prompt that fits); a longer prompt keeps its end, where the question and the
        assistant's header the completion follows are (the side TRL's max_prompt_length kept)."""
        limit = self.cfg.cutoff_len
        return prompt[-limit:] if len(prompt) > limit else prompt

    def parse_saved(self, table: Any, path: str) -> list[Any]:
        raise DataFormatError(_("stage grpo keeps each prompt's record for the reward functions, which tokenized_path does "
                                "not hold; remove tokenized_path"))

    def steps_per_epoch(self, examples: int, batches_per_epoch: int, accum: int, world: int) -> int:
        """An epoch is the whole generations its prompts fill (each prompt once, with
        num_generations completions; the prompts left over are dropped, as TRL's RepeatSampler
        drops them), each generation serving steps_per_generation x num_iterations micro
        batches (TRL's count)."""
        o = self.options
        spg = steps_per_generation(self.cfg, dict(o))
        per_generation = self.cfg.per_device_train_batch_size * world * spg // o.num_generations  # prompts
        if examples < per_generation:
            raise DataFormatError(_("{n} prompts are fewer than one generation takes ({per} prompts: "
                                    "per_device_train_batch_size x processes x steps_per_generation / num_generations); "
                                    "add prompts or lower those").format(n=examples, per=per_generation))
        return examples // per_generation * spg * o.num_iterations // accum

    # --- model
    def keep_start(self, model: nn.Module) -> None:
        if self.reference is not None:
            self.reference.keep(model)

    def attach(self, engine: Any) -> None:
        self.engine = engine
        if self.reference is not None:
            self.reference.attach(engine)

    def batches(self, t: Any, start: int) -> BatchSource:
        from ftui.rundir.rollouts import RolloutWriter
        from ftui.runner.rewards import load_rewards

        writer = RolloutWriter(t.run_dir) if t.info.is_main else None
        log = (lambda message: t.writer.write("log", level="warning", message=message)) if t.writer is not None else None
        self.rollouts = Rollouts(self.cfg, self.options, t.engine, self, t.data.train, self.load_rewards(load_rewards),
                                 stop_ids_of(self.cfg, self.tokenizer, t.engine.unwrap()), self.pad_id, writer, log)
        return GeneratedBatches(self.rollouts.micro_batch, t.device, start)

    def load_rewards(self, load: Callable) -> Any:
        # after the resumed run's RNG is restored: an rm run's value head made on loading must
        # not use up the run's random numbers, or a resumed run would not sample as the whole one
        with torch.random.fork_rng(devices=[]):
            return load(self.cfg, self.tokenizer, self.engine.device if self.engine is not None else None)

    def eval_rollouts(self, engine: Any) -> Rollouts:
        """Rollouts for an evaluation outside training (the eval job: ``ftui eval``): sampling
        and rewards as the run's, no rollouts file."""
        from ftui.runner.rewards import load_rewards

        self.engine = engine
        self.rollouts = Rollouts(self.cfg, self.options, engine, self, [], self.load_rewards(load_rewards),
                                 stop_ids_of(self.cfg, self.tokenizer, engine.unwrap()), self.pad_id)
        return self.rollouts

    @property
    def pad_id(self) -> int:
        pad = self.tokenizer.pad_token_id
        return pad if pad is not None else self.tokenizer.eos_token_id

    def window_figures(self) -> dict[str, float]:
        return self.rollouts.window_figures() if self.rollouts is not None else {}

    def loss(self, model: nn.Module, batch: Any, autocast: Callable) -> MicroLoss:
        o = self.options
        ref = None
        if self.reference is not None:  # first, without gradients (as dpo: one training forward for the engines' hooks)
            ref = self.reference_logps(model, batch, autocast)
        logps, entropy = micro_batch_token_logps(model, self.head, batch.model_inputs(), batch.labels, autocast,
                                                 o.temperature)
        total, _units, figures = grpo_loss(logps, batch.old_logps, ref, batch.advantages, batch.mask,
                                           loss_type=o.loss_type, beta=o.beta, epsilon=o.epsilon,
                                           epsilon_high=o.epsilon_high or o.epsilon,
                                           max_completion_length=o.max_completion_length,
                                           bias_correction_kl=o.use_bias_correction_kl)
        figures["entropy"] = figure_sums(entropy, batch.mask, loss_type=o.loss_type,
                                         max_completion_length=o.max_completion_length)
        return MicroLoss(total, {name: figures[name].detach() for name in self.figures})

    @torch.no_grad()
    def reference_logps(self, model: nn.Module, batch: Any, autocast: Callable) -> torch.Tensor:
        o, ref = self.options, self.reference
        if ref.copy is not None:
            return micro_batch_token_logps(ref.copy, ref.head, batch.model_inputs(), batch.labels, autocast, o.temperature)[0]
        with ref.engine.unwrap().disable_adapter():
            return micro_batch_token_logps(model, self.head, batch.model_inputs(), batch.labels, autocast, o.temperature)[0]

    # --- evaluation: the eval prompts' completions, scored
    @torch.no_grad()
    def evaluate(self, engine: Any, examples: list[Any], collator: Callable, beat: Callable[[], None]) -> dict[str, Any]:
        """The mean reward of ``num_generations`` completions of each of this rank's eval
        prompts (collective: every rank calls it, with shares that may differ by one)."""
        r = self.rollouts or self.eval_rollouts(engine)
        group, bs = self.options.num_generations, self.cfg.per_device_eval_batch_size
        width = len(r.rewards.names)
        sums = torch.zeros(2 + 2 * width, dtype=torch.float64)  # reward sum, count, per function: sum, count
        todo = [e for e in examples for _s in range(group)]
        count = torch.tensor([float(len(todo))], device=engine.device)
        rounds = int(all_gather_tensor(count, r.world).max().item())  # every rank generates as often: the collectives match
        for k, start in enumerate(range(0, max(rounds, 1), bs)):
            part = todo[start:start + bs]
            prompts = [e.input_ids for e in part] or [examples[0].input_ids if examples else [self.pad_id]]
            completions, _truncated = r.sample(prompts, -1 - k)  # eval generations seeded apart from training's
            if not part:
                beat()
                continue
            texts = [self.tokenizer.decode(c, skip_special_tokens=True) for c in completions]
            scores = r.rewards([e.text for e in part], texts, completions, [e.record for e in part]).double()
            weights = torch.tensor(r.rewards.weights, dtype=torch.float64)
            valid = ~torch.isnan(scores)
            rows = valid.any(1)
            sums[0] += torch.nansum(scores * weights, 1)[rows].sum()
            sums[1] += rows.sum()
            sums[2:2 + width] += torch.nansum(scores, 0)
            sums[2 + width:] += valid.sum(0)
            beat()
        total = engine.all_reduce_sum(sums.to(engine.device)).tolist()
        out: dict[str, Any] = {"eval_loss": None, "eval_reward": total[0] / total[1] if total[1] else None}
        for j, name in enumerate(r.rewards.names):
            n = total[2 + width + j]
            out[f"eval_reward_{name}"] = total[2 + j] / n if n else None
        return {k: v for k, v in out.items() if k == "eval_loss" or (v is not None and math.isfinite(v))}
