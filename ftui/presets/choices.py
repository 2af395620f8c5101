"""The fixed choices of a RunConfig (stages, engines, schedulers), without pydantic: the launch form
draws them before the validation model is built, so `ftui` paints its first frame sooner."""

from ftui.presets.engine_presets import PRESET_NAMES, describe

# The training stages (LLaMA-Factory's names), each a module in ftui/runner/stages/, with what it trains on.
STAGE_DESCRIPTIONS = {
    "sft": "supervised fine-tuning: conversations, loss on the answers",
    "pt": "pre-training: raw text, loss on every token",
    "dpo": "preference (DPO and variants): prompt, chosen and rejected answers",
    "kto": "preference (KTO): answers tagged desirable or not",
    "rm": "reward model: a value head scores answers, trained on chosen/rejected pairs",
}
PREF_LOSSES = ("sigmoid", "hinge", "ipo", "orpo", "simpo")  # LLaMA-Factory's pref_loss choices ftui has
STAGES = tuple(STAGE_DESCRIPTIONS)
ENGINES = PRESET_NAMES
SCHEDULERS = (
    "linear", "cosine", "cosine_with_restarts", "polynomial", "constant",
    "constant_with_warmup", "inverse_sqrt",
)
# "what it is: when to use it", from the preset files (one source for the form and the CLI)
ENGINE_DESCRIPTIONS = {name: "{}. Use when {}".format(*describe(name)) for name in ENGINES}
