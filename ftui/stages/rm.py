"""Reward modelling (``stage: rm``): a value head scores answers, trained on chosen/rejected
pairs; final/ holds the value head beside the model."""

from ftui.i18n import N_
from ftui.stages.description import PACKING_NEVER, PAIRS, PlannerTerms, StageDescription

DESCRIPTION = StageDescription(
    name="rm", order=50,
    short=N_("reward model"),
    help=N_("reward model: a value head scores answers, trained on chosen/rejected pairs"),
    data=PAIRS,
    packing=PACKING_NEVER,
    answers_only=True,
    rows_per_example=2,
    value_head=True,
    figures=("rewards_chosen", "rewards_rejected", "rewards_margin", "rewards_accuracy"),
    plotted_first=("rewards_margin", "rewards_accuracy"),
    planner=PlannerTerms(rows_with_gradients=2, output="value"),
)
