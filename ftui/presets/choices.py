"""The fixed choices of a RunConfig (engines, schedulers, pref_loss), without pydantic: the launch form
draws them before the validation model is built, so `ftui` paints its first frame sooner."""

from ftui.i18n import _
from ftui.presets.engine_presets import PRESET_NAMES, describe
from ftui.stages.dpo import PREF_LOSSES as DPO_LOSSES

# The training stages are described in ftui/stages/ (their names, help, options): read them there.
PREF_LOSSES = tuple(value for value, _what in DPO_LOSSES)  # LLaMA-Factory's pref_loss choices ftui has (stage dpo's option)
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
