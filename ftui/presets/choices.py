"""The fixed choices of a RunConfig (engines, schedulers), without pydantic: the launch form
draws them before the validation model is built, so `ftui` paints its first frame sooner."""

ENGINES = ("single", "ddp")
SCHEDULERS = (
    "linear", "cosine", "cosine_with_restarts", "polynomial", "constant",
    "constant_with_warmup", "inverse_sqrt",
)
ENGINE_DESCRIPTIONS = {
    "single": "one process on one device: the simplest, for models that fit one GPU",
    "ddp": "DistributedDataParallel: a full copy per GPU, gradients averaged; fastest when it fits",
}
