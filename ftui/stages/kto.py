"""Kahneman-Tversky optimisation (``stage: kto``): answers tagged desirable or not, against a
frozen reference model; each example also runs a mismatched answer (KTO's KL estimate)."""

from ftui.i18n import N_
from ftui.stages.description import PACKING_NEVER, TAGGED_ANSWERS, PlannerTerms, StageDescription, StageOption, always
from ftui.stages.preference_options import PREF_BETA, PREF_FTX

DESCRIPTION = StageDescription(
    name="kto", order=40,
    short=N_("preference (KTO)"),
    help=N_("preference (KTO): answers tagged desirable or not"),
    data=TAGGED_ANSWERS,
    packing=PACKING_NEVER,
    answers_only=True,
    options=(
        PREF_BETA,
        PREF_FTX,
        StageOption("kto_chosen_weight", N_("desirable weight"), N_("kto: weight of the desirable examples' loss"), 1.0, gt=0.0),
        StageOption("kto_rejected_weight", N_("undesirable weight"), N_("kto: weight of the undesirable examples' loss"), 1.0, gt=0.0),
    ),
    reference_model=always,
    rows_per_example=2,  # its answer's row and the mismatched one
    figures=("rewards_accuracy", "rewards_margin", "kl"),
    plotted_first=("rewards_margin", "rewards_accuracy"),
    planner=PlannerTerms(rows_with_gradients=1, output="logps"),  # the mismatched row runs without gradients
)
