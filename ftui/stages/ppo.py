"""Proximal policy optimisation (``stage: ppo``), as LLaMA-Factory 0.9.5 runs it (its
CustomPPOTrainer on TRL 0.9.6's ``PPOTrainer.step``): the policy answers a batch of prompts,
the reward model of an ftui ``rm`` run scores each answer (its value at the last token), a
per-token reward with a KL penalty to the reference model and a value head on the policy give
GAE advantages, and ``ppo_epochs`` passes of clipped policy and value losses train on them.

The keys are LLaMA-Factory's, with its defaults: ``reward_model`` (an rm run's directory, in
place of LF's model path or adapter), ``reward_model_type`` (lora / full: the rm run's method;
api is refused), the ``ppo_*`` keys and the generating keys PPO reads (``max_new_tokens``,
``temperature``, ``top_p``, ``top_k``, ``repetition_penalty``, ``do_sample``). One loop step is
one optimizer step (``gradient_accumulation_steps`` mini batches of
``per_device_train_batch_size`` completions), so a rollout batch of ``ppo_buffer_size`` x
that many prompts trains ``ppo_buffer_size`` x ``ppo_epochs`` optimizer steps."""

from __future__ import annotations

from typing import Any

from ftui.i18n import N_, _
from ftui.stages.description import (CONVERSATIONS, PACKING_NEVER, PlannerTerms, Problem, StageDescription, StageOption,
                                     always)

REWARD_MODEL_TYPES = (("lora", N_("the rm run trained a LoRA adapter")),
                      ("full", N_("the rm run trained the whole model (full or freeze)")),
                      ("api", N_("a reward server (not supported)")))
# Measured by the rollouts (Stage.window_figures: per completion, every rank's), then the loss's (per mini batch)
ROLLOUT_FIGURES = ("reward", "reward_std", "kl", "kl_coef", "completion_length", "clipped_ratio")
LOSS_FIGURES = ("policy_loss", "value_loss", "clipfrac", "vf_clipfrac", "approx_kl")

OPTIONS = (
    StageOption("reward_model", N_("reward model (an rm run)"),
                N_("ppo: the directory of an ftui rm run whose reward model scores the answers"), "", str),
    StageOption("reward_model_type", N_("reward model type"),
                N_("ppo: how the rm run trained its model (LLaMA-Factory's reward_model_type)"), "lora", str,
                choices=REWARD_MODEL_TYPES),
    StageOption("ppo_buffer_size", N_("rollout batches per PPO step"),
                N_("ppo: mini-batch groups (of per_device_train_batch_size x gradient_accumulation_steps prompts) "
                   "generated before the PPO epochs"), 1, int, ge=1),
    StageOption("ppo_epochs", N_("PPO epochs"), N_("ppo: passes over each rollout batch"), 4, int, ge=1),
    StageOption("ppo_score_norm", N_("normalise scores"),
                N_("ppo: normalise the reward model's scores by their running mean and standard deviation"), False, bool),
    StageOption("ppo_target", N_("target KL"), N_("ppo: the KL the adaptive KL coefficient aims at"), 6.0, gt=0.0),
    StageOption("ppo_whiten_rewards", N_("whiten rewards"),
                N_("ppo: whiten the per-token rewards before computing advantages"), False, bool),
    StageOption("max_new_tokens", N_("max new tokens"), N_("ppo: the most tokens an answer may have"), 1024, int, ge=1),
    StageOption("do_sample", N_("sample"), N_("ppo: sample the answers (off: greedy)"), True, bool),
    StageOption("temperature", N_("sampling temperature"), N_("ppo: the sampling temperature"), 0.95, gt=0.0),
    StageOption("top_p", N_("top-p"), N_("ppo: nucleus sampling's probability mass (1: off)"), 0.7, gt=0.0, le=1.0),
    StageOption("top_k", N_("top-k"), N_("ppo: sample among the k likeliest tokens (0: off)"), 50, int, ge=0),
    StageOption("repetition_penalty", N_("repetition penalty"),
                N_("ppo: penalty for repeated tokens while sampling (1: none)"), 1.0, gt=0.0),
)


def rollout_prompts(cfg: Any, options: Any) -> int:
    """Prompts one rank answers per rollout batch: LLaMA-Factory's PPO batch_size
    (per_device_train_batch_size x gradient_accumulation_steps x ppo_buffer_size)."""
    return cfg.per_device_train_batch_size * cfg.gradient_accumulation_steps * int(options["ppo_buffer_size"])


def rules(cfg: Any) -> list[Problem]:
    """What LLaMA-Factory's PPO refuses or lacks, said before the run (the reward model's
    directory is checked by ftui.config.reward_checks)."""
    out: list[Problem] = []
    options = DESCRIPTION.option_values(cfg)
    if cfg.tokenized_path:
        out.append(("tokenized_path", cfg.tokenized_path,
                    _("stage ppo encodes its prompts as it starts, which tokenized_path does not hold; remove tokenized_path")))
    if options["reward_model_type"] == "api":
        out.append(("reward_model_type", "api",
                    _("ftui does not call a reward server; train a reward model with stage rm and give its run directory "
                      "as reward_model with reward_model_type lora or full")))
    elif options["reward_model_type"] == "lora" and cfg.finetuning_type != "lora":
        out.append(("reward_model_type", "lora",
                    _("reward_model_type lora needs finetuning_type lora (as LLaMA-Factory); with {method} the reward "
                      "model is a full one: train the rm run with full or freeze and set reward_model_type full").format(
                        method=cfg.finetuning_type)))
    beams = (cfg.model_extra or {}).get("num_beams", 1)
    if beams not in (1, None):
        out.append(("num_beams", beams, _("stage ppo samples one answer per prompt; beam search is not supported: "
                                          "remove num_beams")))
    if cfg.val_size or cfg.eval_dataset:
        key = "val_size" if cfg.val_size else "eval_dataset"
        out.append((key, getattr(cfg, key), _("stage ppo does not evaluate (LLaMA-Factory's PPO has no evaluation); "
                                              "remove {key}").format(key=key)))
    return out


DESCRIPTION = StageDescription(
    name="ppo", order=70,
    short=N_("reinforcement learning (PPO)"),
    help=N_("PPO: the model answers prompts, an rm run's reward model scores the answers, a value head and a "
            "KL penalty to the reference model guide the updates"),
    data=CONVERSATIONS,
    packing=PACKING_NEVER,
    answers_only=True,
    options=OPTIONS,
    rules=rules,
    reference_model=always,  # LoRA: the adapter off; full and freeze: a frozen copy
    value_head=True,
    figures=ROLLOUT_FIGURES + LOSS_FIGURES,  # the runner's loss returns LOSS_FIGURES; the rollouts the others
    plotted_first=("reward", "value_loss"),
    planner=PlannerTerms(generation=True, output="logits"),
)
