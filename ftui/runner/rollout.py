"""Scored rollouts: the policy's own completions of the dataset's prompts, with their rewards
and advantages, as the micro batches of a stage that learns from rewards (grpo; ppo later).

One *generation* makes ``steps_per_generation`` micro batches of every rank, each trained on
``num_iterations`` times, in TRL's order (micro step ``k`` of a generation takes buffer
``k % steps_per_generation``). Its prompts are the next ``generation batch / num_generations``
of a global, seeded order (a permutation per epoch from ``seed + epoch``), each repeated
``num_generations`` times; rank ``r`` takes the ``r``-th contiguous slice, so a group may
straddle ranks as in TRL. Each rank generates its slice with the KV cache on the unwrapped
model (peft: the adapter active), scores it, and the reward rows of every rank are gathered so
that every rank computes the same advantages (``grpo_loss.group_advantages``) and keeps its
slice. The rank's rows are shuffled (seeded) before they are cut into the generation's micro
batches, as TRL shuffles them. Rank 0 writes every rank's rows to rollouts.jsonl, in group order.

Resume: each generation's sampling is seeded from (seed, generation, rank) inside a forked RNG,
so a run resumed at a generation boundary regenerates exactly the rollouts the uninterrupted
run made (the default: steps_per_generation x num_iterations == gradient_accumulation_steps,
where every step starts a generation). A checkpoint taken inside a generation's buffer
(steps_per_generation x num_iterations > gradient_accumulation_steps) resumes by generating
that generation again from its seed with the resumed weights: its rollouts then differ from the
uninterrupted run's (the run says so in a warning).
"""

from __future__ import annotations

import contextlib
import math
import random
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

from ftui.i18n import _
from ftui.runner.data import IGNORE
from ftui.runner.grpo_loss import group_advantages
from ftui.runner.loss import micro_batch_token_logps


@dataclass
class PromptExample:
    """A dataset record's prompt: its ids (the template's rendering, cut as predict cuts it),
    its text, and the record for the reward functions (raw columns, ``reference``, ``record``,
    ``dataset``)."""

    input_ids: list[int]
    text: str
    record: dict[str, Any]
    sequences = 1

    def columns(self) -> dict[str, Any]:
        """As ``ftui data`` shows it: the prompt, nothing learnt from it."""
        return {"input_ids": self.input_ids, "labels": [IGNORE] * len(self.input_ids)}


@dataclass
class RolloutBatch:
    """One micro batch of scored completions: each row its prompt and completion laid end to
    end (right-padded); ``labels`` the completion's tokens (IGNORE elsewhere), ``mask`` (rows,
    T-1) which next-token positions the loss counts, ``advantages`` per row, ``old_logps`` the
    policy's at generation time (None when the batch is trained on once, on-policy)."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    labels: torch.Tensor
    mask: torch.Tensor
    advantages: torch.Tensor
    loss_tokens: float
    old_logps: torch.Tensor | None = None
    real_tokens: int = 0
    trainable_tokens: int = 0
    info: list[dict[str, Any]] = field(default_factory=list)

    def to(self, device: Any) -> "RolloutBatch":
        moved = {k: (v.to(device) if torch.is_tensor(v) else v) for k, v in vars(self).items()}
        return RolloutBatch(**moved)

    def model_inputs(self) -> dict[str, torch.Tensor]:
        return {"input_ids": self.input_ids, "attention_mask": self.attention_mask}


def buffer_rows(prompts: list[list[int]], completions: list[list[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(ids, attention mask, labels) of prompt + answer rows, right-padded to the longest."""
    width = max(len(p) + len(c) for p, c in zip(prompts, completions))
    ids = torch.full((len(prompts), width), pad, dtype=torch.long)
    attention = torch.zeros_like(ids)
    labels = torch.full_like(ids, IGNORE)
    for i, (p, c) in enumerate(zip(prompts, completions)):
        ids[i, :len(p) + len(c)] = torch.tensor(p + c)
        attention[i, :len(p) + len(c)] = 1
        labels[i, len(p):len(p) + len(c)] = torch.tensor(c)
    return ids, attention, labels


def rollout_batch(prompts: list[list[int]], completions: list[list[int]], truncated: list[bool], advantages: torch.Tensor,
                  pad: int, loss_type: str, mask_truncated: bool) -> RolloutBatch:
    """The micro batch of these completions: rows right-padded, the loss's units counted on the host."""
    ids, attention, labels = buffer_rows(prompts, completions, pad)
    mask = (labels[:, 1:] != IGNORE).float()
    if mask_truncated:
        mask[torch.tensor(truncated, dtype=torch.bool)] = 0.0
    units = {"dapo": float(mask.sum()), "grpo": float(len(prompts)), "dr_grpo": float(len(prompts)), "bnpo": 1.0}[loss_type]
    return RolloutBatch(ids, attention, labels, mask, advantages, units, real_tokens=int(attention.sum()),
                        trainable_tokens=int(mask.sum()))


def completion_of(row: list[int], stops: set[int]) -> tuple[list[int], bool]:
    """A generated row's completion up to and including its first stop id, and whether it has
    none (cut at max_completion_length)."""
    for k, token in enumerate(row):
        if token in stops:
            return row[:k + 1], False
    return row, True


def generation_seed(seed: int, generation: int, rank: int) -> int:
    return (seed * 1_000_003 + generation * 7919 + rank * 104_729) % (2**63 - 1)


def prompt_order(count: int, seed: int, start: int, n: int, used: int | None = None) -> list[int]:
    """Prompt indices ``start`` .. ``start + n`` of the run's stream: each epoch the first
    ``used`` (default all) of a permutation seeded by ``seed + epoch``; a stage that takes its
    prompts a generation at a time uses the whole generations that fit (TRL's RepeatSampler
    drops the rest of each epoch)."""
    used = used or count
    out = []
    for position in range(start, start + n):
        epoch, k = divmod(position, used)
        out.append(_permutation(count, seed + epoch)[k])
    return out


_PERMS: dict[tuple[int, int], list[int]] = {}


def _permutation(count: int, seed: int) -> list[int]:
    if (count, seed) not in _PERMS:
        order = list(range(count))
        random.Random(seed).shuffle(order)
        _PERMS[(count, seed)] = order
    return _PERMS[(count, seed)]


def further_sampling(options: Any) -> dict[str, Any]:
    """The sampling keys TRL sets besides temperature, top_p and top_k, as TRL sets them:
    ``repetition_penalty`` always (its 1.0 too, so that a model's generation_config, e.g. a
    chat model's 1.05, does not apply), ``min_p`` only when on (TRL's None). A stage without
    these options (their defaults) samples as TRL's defaults do."""
    out: dict[str, Any] = {"repetition_penalty": float(getattr(options, "repetition_penalty", 1.0))}
    if getattr(options, "min_p", 0.0):
        out["min_p"] = float(options.min_p)
    return out


@contextlib.contextmanager
def generating(engine: Any):
    """The unwrapped model, in eval mode, its parameters whole where the engine shards them
    (ZeRO-3: gathered for the generation, as TRL does; FSDP2 unshards each layer per forward)."""
    model = engine.unwrap()
    was_training = model.training
    model.eval()
    gathered = contextlib.nullcontext()
    if getattr(engine, "stage", None) == 3:
        import deepspeed

        gathered = deepspeed.zero.GatheredParameters(list(model.parameters()))
    try:
        with gathered, torch.no_grad():
            yield model
    finally:
        model.train(was_training)


def all_gather_tensor(t: torch.Tensor, world: int) -> torch.Tensor:
    """Every rank's equal-shaped ``t``, concatenated in rank order along dim 0."""
    if world == 1:
        return t
    parts = [torch.zeros_like(t) for _rank in range(world)]
    dist.all_gather(parts, t.contiguous())
    return torch.cat(parts)


def all_gather_objects(obj: Any, world: int) -> list[Any]:
    if world == 1:
        return [obj]
    out: list[Any] = [None] * world
    dist.all_gather_object(out, obj)
    return out


def sample_completions(engine: Any, prompts: list[list[int]], *, pad: int, stop_ids: list[int], seed: int, synced: bool,
                       sampling: dict[str, Any]) -> tuple[list[list[int]], list[bool]]:
    """Completions of left-padded prompts (grpo's and ppo's), generated at once from an RNG
    seeded with ``seed`` (the run's own RNG left as it was), ``sampling`` the generate keys
    (do_sample, temperature, top_p, top_k, max_new_tokens ...): each completion up to its
    first stop id, and whether it has none."""
    device = engine.device
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, p in enumerate(prompts):
        ids[i, width - len(p):] = torch.tensor(p)
        mask[i, width - len(p):] = 1
    devices = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices), generating(engine) as model:
        torch.manual_seed(seed)
        with engine.autocast():
            out = model.generate(input_ids=ids.to(device), attention_mask=mask.to(device), eos_token_id=stop_ids,
                                 pad_token_id=pad, use_cache=True, synced_gpus=synced, **sampling)
    stops = set(stop_ids)
    pairs = [completion_of(row, stops) for row in out[:, width:].tolist()]
    return [c for c, _t in pairs], [t for _c, t in pairs]


class Rollouts:
    """The micro batches of a run that learns from rewards, made a generation at a time."""

    def __init__(self, cfg: Any, options: Any, engine: Any, stage: Any, prompts: list[PromptExample], rewards: Any,
                 stop_ids: list[int], pad: int, writer: Any = None, log: Any = None):
        self.cfg, self.o, self.engine, self.stage = cfg, options, engine, stage
        self.prompts, self.rewards, self.stop_ids, self.pad = prompts, rewards, stop_ids, pad
        self.writer, self.log = writer, log
        self.rank, self.world = engine.info.rank, engine.info.world_size
        self.accum = cfg.gradient_accumulation_steps
        self.spg = int(options.steps_per_generation) or self.accum
        self.per_generation = self.spg * int(options.num_iterations)  # micro batches one generation serves
        self.local = cfg.per_device_train_batch_size * self.spg  # completions this rank generates
        self.group = int(options.num_generations)
        self.generation: int | None = None
        self.buffer: list[RolloutBatch] = []
        self.window: list[dict[str, float]] = []
        # sharded parameters (FSDP2, ZeRO-3) are gathered by collectives in every forward: each
        # rank goes on stepping until every rank's completions are done (HF's synced_gpus, as TRL)
        strategy = getattr(getattr(getattr(engine, "cfg", None), "engine_spec", None), "strategy", "")
        self.synced = self.world > 1 and (strategy == "fsdp" or getattr(engine, "stage", None) == 3)
        self.needs_old = self.accum % self.per_generation != 0  # TRL: rollouts serve more than one optimizer step

    def micro_batch(self, index: int) -> RolloutBatch:
        generation, k = divmod(index, self.per_generation)
        if generation != self.generation:
            if self.generation is None and k and self.log is not None:
                self.log(_("resumed inside a generation's rollouts: generation {g} is made again with the resumed weights, "
                           "so its rollouts differ from the uninterrupted run's").format(g=generation))
            self.buffer = self.generate(generation)
            self.generation = generation
        return self.buffer[k % self.spg]

    def generate(self, generation: int) -> list[RolloutBatch]:
        o, bs = self.o, self.cfg.per_device_train_batch_size
        n_prompts = self.local * self.world // self.group
        order = prompt_order(len(self.prompts), self.cfg.seed, generation * n_prompts, n_prompts,
                             len(self.prompts) // n_prompts * n_prompts)
        flat = [(g, s, order[g]) for g in range(n_prompts) for s in range(self.group)]
        mine = flat[self.rank * self.local:(self.rank + 1) * self.local]
        examples = [self.prompts[p] for _g, _s, p in mine]
        completions, truncated = self.sample([e.input_ids for e in examples], generation)
        texts = [self.stage.tokenizer.decode(c, skip_special_tokens=True) for c in completions]
        # a RewardError (the user's function failed) ends the run with its message (ftui.runner.faults)
        scores = self.rewards([e.text for e in examples], texts, completions, [e.record for e in examples])
        device = self.engine.device
        everyone = all_gather_tensor(torch.cat([scores.float(), torch.tensor([[len(c), t] for c, t in zip(completions, truncated)],
                                                                             dtype=torch.float32)], 1).to(device), self.world).cpu()
        per_func, lengths = everyone[:, :-2], everyone[:, -2:]
        weights = torch.tensor(self.rewards.weights, dtype=torch.float32)
        advantages, rewards, zero_std = group_advantages(per_func, weights, self.group, o.scale_rewards)
        self.note_figures(per_func, rewards, lengths, zero_std)
        local = slice(self.rank * self.local, (self.rank + 1) * self.local)
        mine_adv = advantages[local]
        # the rank's rows shuffled before they are cut into micro batches (TRL's shuffle_sequence_dict),
        # seeded like the generation: a micro batch mixes groups when a generation makes several
        order = torch.randperm(self.local, generator=torch.Generator().manual_seed(
            generation_seed(self.cfg.seed, generation, self.rank) + 1)).tolist() if self.spg > 1 else list(range(self.local))
        batches = []
        for k in range(self.spg):
            rows = order[k * bs:(k + 1) * bs]
            batch = rollout_batch([examples[i].input_ids for i in rows], [completions[i] for i in rows],
                                  [truncated[i] for i in rows], mine_adv[rows], self.pad, o.loss_type,
                                  o.mask_truncated_completions)
            if self.needs_old:
                batch.old_logps = self.policy_logps(batch)
            batches.append(batch)
        micro = [0] * self.local  # each row's micro batch in the generation
        for position, i in enumerate(order):
            micro[i] = position // bs
        self.write_rows(generation, mine, examples, texts, completions, truncated, per_func[local], rewards[local], mine_adv,
                        micro)
        return batches

    def sample(self, prompts: list[list[int]], generation: int) -> tuple[list[list[int]], list[bool]]:
        """Completions of the prompts, sampled with the run's settings from a seeded RNG."""
        o = self.o
        return sample_completions(self.engine, prompts, pad=self.pad, stop_ids=self.stop_ids, synced=self.synced,
                                  seed=generation_seed(self.cfg.seed, generation, self.rank),
                                  sampling=dict(do_sample=True, temperature=o.temperature, top_p=o.top_p, top_k=o.top_k,
                                                **further_sampling(o), max_new_tokens=o.max_completion_length))

    @torch.no_grad()
    def policy_logps(self, batch: RolloutBatch) -> torch.Tensor:
        """The policy's per-token log-probabilities now (TRL's old_per_token_logps)."""
        on = batch.to(self.engine.device)
        logps, _entropy = micro_batch_token_logps(self.engine.model, self.stage.head, on.model_inputs(), on.labels,
                                                  self.engine.autocast, self.o.temperature)
        return logps.cpu()

    def note_figures(self, per_func: torch.Tensor, rewards: torch.Tensor, lengths: torch.Tensor, zero_std: torch.Tensor) -> None:
        """The generation's figures for the next step event (global: every rank has them all)."""
        groups = rewards.view(-1, self.group)
        spread = rewards.std() if self.o.scale_rewards == "batch" else groups.std(dim=1).mean()  # TRL's reward_std
        figures = {"reward": rewards.mean().item(), "reward_std": spread.item(),
                   "completion_length": lengths[:, 0].mean().item(), "clipped_ratio": lengths[:, 1].mean().item(),
                   "frac_reward_zero_std": zero_std.float().mean().item()}
        for j, name in enumerate(self.rewards.names):
            column = per_func[:, j]
            valid = column[~torch.isnan(column)]
            if valid.numel():
                figures[f"reward_{name}"] = valid.mean().item()
        self.window.append(figures)

    def window_figures(self) -> dict[str, float]:
        """The means of the generations' figures since the last call."""
        window, self.window = self.window, []
        names = dict.fromkeys(k for f in window for k in f)
        return {k: sum(f[k] for f in window if k in f) / sum(1 for f in window if k in f) for k in names}

    def write_rows(self, generation: int, mine: list[tuple[int, int, int]], examples: list[PromptExample], texts: list[str],
                   completions: list[list[int]], truncated: list[bool], per_func: torch.Tensor, rewards: torch.Tensor,
                   advantages: torch.Tensor, micro: list[int]) -> None:
        rows = []
        for i, ((g, s, _p), e) in enumerate(zip(mine, examples)):
            first_micro = generation * self.per_generation + micro[i]
            scores = {name: (None if math.isnan(v) else v) for name, v in zip(self.rewards.names, per_func[i].tolist())}
            rows.append({"step": first_micro // self.accum + 1, "generation": generation, "group": g, "sample": s,
                         "prompt": e.text, "completion": texts[i], "reference": e.record.get("reference"),
                         "rewards": scores, "reward": None if all(v is None for v in scores.values()) else rewards[i].item(),
                         "advantage": advantages[i].item(), "length": len(completions[i]), "truncated": truncated[i]})
        everyone = all_gather_objects(rows, self.world)
        if self.writer is not None:
            self.writer.write([row for part in everyone for row in part])
