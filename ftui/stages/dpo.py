"""Direct preference optimisation and its variants (``stage: dpo``): pairs of a chosen and a
rejected answer; against a frozen reference model, except for the reference-free losses."""

from __future__ import annotations

from typing import Any, Mapping

from ftui.i18n import N_, _
from ftui.stages.description import PACKING_NEVER, PAIRS, PlannerTerms, Problem, StageDescription, StageOption
from ftui.stages.preference_options import PREF_BETA, PREF_FTX

# LLaMA-Factory's pref_loss values ftui computes, and what each is (the form shows "sigmoid: DPO")
PREF_LOSSES = (("sigmoid", "DPO"), ("hinge", N_("hinge (SLiC)")), ("ipo", N_("IPO, squared margin")),
               ("orpo", N_("ORPO, no reference model")), ("simpo", N_("SimPO, no reference model")))
REFERENCE_FREE = ("orpo", "simpo")  # losses on the policy alone: no reference model
FIGURES = ("rewards_chosen", "rewards_rejected", "rewards_margin", "rewards_accuracy", "logps_chosen", "logps_rejected")


def needs_reference(options: Mapping[str, Any]) -> bool:
    return options.get("pref_loss") not in REFERENCE_FREE


def rules(cfg: Any) -> list[Problem]:
    if cfg.dpo_label_smoothing and cfg.pref_loss != "sigmoid":
        return [("dpo_label_smoothing", cfg.dpo_label_smoothing,
                 _("label smoothing is part of the sigmoid (DPO) loss only, not {loss}; set it to 0 or pref_loss "
                   "sigmoid").format(loss=cfg.pref_loss))]
    return []


DESCRIPTION = StageDescription(
    name="dpo", order=30,
    short=N_("preference (DPO and variants)"),
    help=N_("preference (DPO and variants): prompt, chosen and rejected answers"),
    data=PAIRS,
    packing=PACKING_NEVER,
    answers_only=True,
    options=(
        PREF_BETA,
        StageOption("pref_loss", N_("preference loss"),
                    N_("dpo: sigmoid (DPO), hinge, ipo, orpo or simpo (the last two need no reference model)"),
                    "sigmoid", str, choices=PREF_LOSSES),
        StageOption("dpo_label_smoothing", N_("label smoothing (sigmoid)"),
                    N_("dpo sigmoid: robust DPO's label smoothing (0 to 0.5)"), 0.0, ge=0.0, le=0.5),
        StageOption("simpo_gamma", N_("SimPO target margin"), N_("dpo simpo: the target reward margin"), 0.5),
        PREF_FTX,
    ),
    rules=rules,
    reference_model=needs_reference,
    rows_per_example=2,  # the chosen and the rejected answer, in one forward
    figures=FIGURES,
    plotted_first=("rewards_margin", "rewards_accuracy"),
    planner=PlannerTerms(rows_with_gradients=2, output="logps"),
)
