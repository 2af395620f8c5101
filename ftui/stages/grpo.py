"""Group relative policy optimisation (``stage: grpo``), as TRL's GRPOTrainer (1.16) computes
it: for each prompt the policy writes ``num_generations`` completions, reward functions score
them, each completion's advantage is its reward against its group's mean (scaled by the
group's standard deviation), and a clipped policy-gradient loss pushes the policy toward the
better ones (with a KL term to a frozen reference model when ``beta`` is not 0).

The keys are TRL's GRPOConfig names with its defaults; ``per_device_train_batch_size`` counts
completions, as in TRL. What TRL has and ftui does not implement has no key here (vLLM,
importance_sampling_level, top_entropy_quantile, delta ...): such a key is refused (ftui.presets.trl_keys
says why and what to do)."""

from __future__ import annotations

from typing import Any, Mapping

from ftui.i18n import N_, _
from ftui.stages.description import CONVERSATIONS, PACKING_NEVER, PlannerTerms, Problem, StageDescription, StageOption
from ftui.stages.reward_options import REWARD_OPTIONS

LOSS_TYPES = (("dapo", N_("DAPO: mean over the step's completion tokens")),
              ("grpo", N_("GRPO: each completion's token mean, averaged")),
              ("bnpo", N_("BNPO: token mean over the micro batch")),
              ("dr_grpo", N_("Dr. GRPO: token sum over max_completion_length")))
SCALE_REWARDS = (("group", N_("divide by the group's standard deviation")),
                 ("batch", N_("divide by the generation batch's standard deviation")),
                 ("none", N_("no scaling (Dr. GRPO)")))
# Measured by the rollouts (Stage.window_figures: per completion), then the loss's (per token)
ROLLOUT_FIGURES = ("reward", "reward_std", "completion_length", "clipped_ratio", "frac_reward_zero_std")
LOSS_FIGURES = ("kl", "entropy", "clip_ratio")

OPTIONS = (
    StageOption("num_generations", N_("completions per prompt"),
                N_("grpo: completions generated for each prompt (a group; at least 2)"), 8, int, ge=2),
    StageOption("max_completion_length", N_("max completion tokens"),
                N_("grpo: the most tokens a completion may have"), 256, int, ge=1),
    StageOption("temperature", N_("sampling temperature"),
                N_("grpo: the sampling temperature (also divides the logits of the loss)"), 1.0, gt=0.0),
    StageOption("top_p", N_("top-p"), N_("grpo: nucleus sampling's probability mass (1: off)"), 1.0, gt=0.0, le=1.0),
    StageOption("top_k", N_("top-k"), N_("grpo: sample among the k likeliest tokens (0: off)"), 0, int, ge=0),
    StageOption("min_p", N_("min-p"),
                N_("grpo: drop tokens less likely than min_p x the likeliest one's probability (0: off)"), 0.0,
                ge=0.0, le=1.0),
    StageOption("repetition_penalty", N_("repetition penalty"),
                N_("grpo: penalise tokens already in the prompt or the completion (1: off; not the model's "
                   "generation_config value)"), 1.0, gt=0.0),
    StageOption("beta", N_("KL weight"),
                N_("grpo: weight of the KL term to the reference model (0: no reference model)"), 0.0, ge=0.0),
    StageOption("use_bias_correction_kl", N_("KL bias correction"),
                N_("grpo: multiply the KL term by the probability ratio (TRL 1.16's default; false: TRL 0.x's plain KL)"),
                True, bool),
    StageOption("epsilon", N_("clip epsilon"), N_("grpo: the ratio's lower clip (1 - epsilon)"), 0.2, gt=0.0),
    StageOption("epsilon_high", N_("clip epsilon (high)"),
                N_("grpo: the ratio's upper clip (1 + epsilon_high; 0: epsilon)"), 0.0, ge=0.0),
    StageOption("loss_type", N_("loss normalisation"), N_("grpo: how the token losses are averaged"), "dapo", str,
                choices=LOSS_TYPES),
    StageOption("scale_rewards", N_("advantage scaling"), N_("grpo: what divides the advantages"), "group", str,
                choices=SCALE_REWARDS),
    StageOption("num_iterations", N_("updates per generation"),
                N_("grpo: times each generated batch is trained on (TRL's mu)"), 1, int, ge=1),
    StageOption("steps_per_generation", N_("micro batches per generation"),
                N_("grpo: micro batches one generation makes (0: gradient_accumulation_steps)"), 0, int, ge=0),
    StageOption("mask_truncated_completions", N_("ignore cut completions"),
                N_("grpo: completions cut at max_completion_length add nothing to the loss"), False, bool),
    *REWARD_OPTIONS,
)


def steps_per_generation(cfg: Any, options: Mapping[str, Any]) -> int:
    return int(options["steps_per_generation"]) or int(cfg.gradient_accumulation_steps)


def rules(cfg: Any) -> list[Problem]:
    """The generation batch (completions per rank x ranks x micro batches a generation) holds
    whole groups, as TRL requires."""
    out: list[Problem] = []
    if cfg.tokenized_path:
        out.append(("tokenized_path", cfg.tokenized_path,
                    _("stage grpo keeps each prompt's record for the reward functions, which tokenized_path does not "
                      "hold; remove tokenized_path")))
    try:
        options = DESCRIPTION.read_options(cfg)
    except ValueError:  # a bad option value: said by the options' own check
        return out
    spg = steps_per_generation(cfg, dict(options))
    batch = cfg.per_device_train_batch_size * cfg.world_size * spg
    if batch % options.num_generations:
        out.append(("num_generations", options.num_generations,
                 _("the generation batch (per_device_train_batch_size {bs} x {world} processes x steps_per_generation "
                   "{spg} = {batch} completions) must hold whole groups of num_generations; choose numbers whose "
                   "product is a multiple of it").format(bs=cfg.per_device_train_batch_size, world=cfg.world_size,
                                                          spg=spg, batch=batch)))
    return out


DESCRIPTION = StageDescription(
    name="grpo", order=60,
    short=N_("reinforcement learning (GRPO)"),
    help=N_("GRPO: the model answers prompts, reward functions score the answers, it learns from the better ones"),
    data=CONVERSATIONS,
    packing=PACKING_NEVER,
    answers_only=True,
    options=OPTIONS,
    rules=rules,
    reference_model=lambda options: options["beta"] != 0,
    figures=ROLLOUT_FIGURES + LOSS_FIGURES,  # the runner's loss returns LOSS_FIGURES; the rollouts the others
    plotted_first=("reward", "completion_length"),
    planner=PlannerTerms(generation=True),  # the rollout's KV cache, the reference copy when beta != 0
)
