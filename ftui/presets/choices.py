"""The fixed choices of a RunConfig (stages, engines, schedulers), without pydantic: the launch form
draws them before the validation model is built, so `ftui` paints its first frame sooner."""

from ftui.i18n import _
from ftui.presets.engine_presets import PRESET_NAMES, describe
from ftui.stages import descriptions
from ftui.stages.dpo import PREF_LOSSES as DPO_LOSSES

# The training stages (LLaMA-Factory's names), each described once in ftui/stages/ (read here for
# the config's list and the form): name -> what it trains on, and what it is in a few words
# ("sft: supervised fine-tuning"). English, marked for extraction there: translate with _() where shown.
# A stage a plugin adds later (ftui.stages.refresh) is in ftui.stages.descriptions(), not in these copies.
STAGE_DESCRIPTIONS = {name: d.help for name, d in descriptions().items()}
STAGE_SHORT = {name: d.short for name, d in descriptions().items()}
PREF_LOSSES = tuple(value for value, _what in DPO_LOSSES)  # LLaMA-Factory's pref_loss choices ftui has
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
