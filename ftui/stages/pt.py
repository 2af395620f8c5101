"""Pre-training (``stage: pt``): raw text, every token carries loss; packed into cutoff_len
blocks of running text unless packing is false."""

from ftui.i18n import N_
from ftui.stages.description import PACKING_ON, RAW_TEXT, PlannerTerms, StageDescription

DESCRIPTION = StageDescription(
    name="pt", order=20,
    short=N_("pre-training"),
    help=N_("pre-training: raw text, loss on every token"),
    data=RAW_TEXT,
    packing=PACKING_ON,
    padding_free=True,
    perplexity=True,
    planner=PlannerTerms(running_text=True),  # one sequence of running text a row, as LLaMA-Factory's blocks
)
