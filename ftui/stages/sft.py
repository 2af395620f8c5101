"""Supervised fine-tuning (``stage: sft``): conversations, the loss on the answers."""

from ftui.i18n import N_
from ftui.stages.description import CONVERSATIONS, PACKING_OFF, StageDescription

DESCRIPTION = StageDescription(
    name="sft", order=10,
    short=N_("supervised fine-tuning"),
    help=N_("supervised fine-tuning: conversations, loss on the answers"),
    data=CONVERSATIONS,
    packing=PACKING_OFF,  # packing: true packs examples kept apart (LLaMA-Factory's neat_packing)
    neat_packing=True,
    padding_free=True,
    perplexity=True,
)
