"""The fixed choices of a RunConfig (stages, engines, schedulers), without pydantic: the launch form
draws them before the validation model is built, so `ftui` paints its first frame sooner."""

from ftui.i18n import N_, _
from ftui.presets.engine_presets import PRESET_NAMES, describe

# The training stages (LLaMA-Factory's names), each a module in ftui/runner/stages/, with what it trains on.
# English, marked for extraction: translate with _() where shown.
STAGE_DESCRIPTIONS = {
    "sft": N_("supervised fine-tuning: conversations, loss on the answers"),
    "pt": N_("pre-training: raw text, loss on every token"),
    "dpo": N_("preference (DPO and variants): prompt, chosen and rejected answers"),
    "kto": N_("preference (KTO): answers tagged desirable or not"),
    "rm": N_("reward model: a value head scores answers, trained on chosen/rejected pairs"),
}
# What each stage is in a few words (the form's stage choices: "sft: supervised fine-tuning")
STAGE_SHORT = {
    "sft": N_("supervised fine-tuning"), "pt": N_("pre-training"), "dpo": N_("preference (DPO and variants)"),
    "kto": N_("preference (KTO)"), "rm": N_("reward model"),
}
PREF_LOSSES = ("sigmoid", "hinge", "ipo", "orpo", "simpo")  # LLaMA-Factory's pref_loss choices ftui has
STAGES = tuple(STAGE_DESCRIPTIONS)
ENGINES = PRESET_NAMES
SCHEDULERS = (
    "linear", "cosine", "cosine_with_restarts", "polynomial", "constant",
    "constant_with_warmup", "inverse_sqrt",
)


def engine_description(name: str) -> str:
    """"What it is. Use when ...", from the preset file (one source for the form and the CLI),
    in the current language; empty for a name that is no preset."""
    if name not in ENGINES:
        return ""
    what, when = describe(name)
    return _("{what}. Use when {when}").format(what=what, when=when)
