"""The fixed choices of a RunConfig (engines, schedulers), without pydantic: the launch form
draws them before the validation model is built, so `ftui` paints its first frame sooner."""

from ftui.presets.engine_presets import PRESET_NAMES, describe

ENGINES = PRESET_NAMES
SCHEDULERS = (
    "linear", "cosine", "cosine_with_restarts", "polynomial", "constant",
    "constant_with_warmup", "inverse_sqrt",
)
# "what it is: when to use it", from the preset files (one source for the form and the CLI)
ENGINE_DESCRIPTIONS = {name: "{}. Use when {}".format(*describe(name)) for name in ENGINES}
