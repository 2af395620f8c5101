"""What a model folder holds (config.json, weights, tokenizer) and what the Hugging Face hub
cache holds, told from file names alone: no torch, no network, fast enough to run on every
keystroke of the launch form. A run that lacks one of these fails only after loading for a
while, with transformers' own message; validation says it first (ftui.config.model_checks).
"""

from __future__ import annotations

import glob
import importlib.util
import os
from pathlib import Path

from ftui.i18n import _

# What transformers' from_pretrained loads: model.safetensors, pytorch_model.bin, their sharded
# index (model.safetensors.index.json), or a variant of them (model.fp16.safetensors).
WEIGHT_PATTERNS = ("*.safetensors", "*.bin", "*.index.json")
# Any one of these lets AutoTokenizer build a tokenizer (tokenizer_config.json names the rest).
TOKENIZER_PATTERNS = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json", "vocab.txt",
                      "spiece.model", "*.tiktoken")
TRUE_VALUES = {"1", "ON", "YES", "TRUE"}  # huggingface_hub's reading of HF_HUB_OFFLINE
DEFAULT_ENDPOINT = "https://huggingface.co"
DEFAULT_MODELSCOPE_ENDPOINT = "https://modelscope.cn"


def _any(folder: Path, patterns: tuple[str, ...]) -> bool:
    return any(glob.glob(glob.escape(str(folder)) + os.sep + p) for p in patterns)


def is_folder(name: str) -> bool:
    """Whether ``name`` is a directory here; False for names no filesystem takes (a NUL, a
    pasted 100 KB name), which Path.is_dir raises on."""
    try:
        return Path(name).expanduser().is_dir()
    except (OSError, ValueError, RuntimeError):  # RuntimeError: ~nosuchuser
        return False


def has_weights(folder: Path) -> bool:
    return _any(folder, WEIGHT_PATTERNS)


def has_tokenizer(folder: Path) -> bool:
    return _any(folder, TOKENIZER_PATTERNS)


def hub_cache_dir() -> Path:
    """Where huggingface_hub keeps downloads, read from the environment now (as
    huggingface_hub.constants does once at import): HF_HUB_CACHE, HUGGINGFACE_HUB_CACHE,
    HF_HOME/hub, XDG_CACHE_HOME/huggingface/hub, ~/.cache/huggingface/hub."""
    cache = os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE")
    if cache:
        return Path(cache).expanduser()
    home = os.environ.get("HF_HOME") or str(Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "huggingface")
    return Path(home).expanduser() / "hub"


def hub_offline() -> bool:
    """HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE) is on: runs load from the cache only."""
    value = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or ""
    return value.upper() in TRUE_VALUES


def hub_endpoint() -> str:
    return os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT


def shown_endpoint(endpoint: str) -> str:
    """An endpoint as messages show it: a user:token@ inside the URL blanked (ftui.safety.url_secrets);
    the real one (hub_endpoint) is what is connected to."""
    from ftui.safety.url_secrets import redact_urls

    return redact_urls(endpoint)


def use_modelscope() -> bool:
    """USE_MODELSCOPE_HUB=1 (LLaMA-Factory's switch): hub names download from ModelScope."""
    return (os.environ.get("USE_MODELSCOPE_HUB") or "").upper() in TRUE_VALUES


def modelscope_endpoint() -> str:
    """Where the modelscope package downloads from: MODELSCOPE_ENDPOINT, the older
    MODELSCOPE_DOMAIN (a host name), else its default."""
    domain = os.environ.get("MODELSCOPE_DOMAIN", "").strip()
    return (os.environ.get("MODELSCOPE_ENDPOINT", "").strip() or (f"https://{domain}" if domain else "")
            or DEFAULT_MODELSCOPE_ENDPOINT)


def modelscope_missing() -> str | None:
    """Why USE_MODELSCOPE_HUB=1 cannot work here (the modelscope package is an optional extra)."""
    if importlib.util.find_spec("modelscope") is not None:
        return None
    return _("USE_MODELSCOPE_HUB=1 downloads through the modelscope package, which is not installed: "
             "pip install modelscope (or pip install 'ftui[modelscope]'), or unset USE_MODELSCOPE_HUB to use the Hugging Face hub")


def cached_snapshots(name: str) -> list[Path]:
    """The hub cache's snapshot folders of the model ``name`` (org/name), newest name first."""
    repo = "models--" + name.replace("/", "--")
    try:
        found = glob.glob(glob.escape(str(hub_cache_dir() / repo)) + "/snapshots/*")
    except ValueError:  # a NUL in a typed name: no such model
        return []
    return [Path(p) for p in sorted(found, reverse=True)]


def cached_for_run(name: str, random_init: bool) -> bool:
    """Whether a run finds what it loads of ``name`` in the hub cache: config.json and a
    tokenizer, and the weights unless the model is built with random weights."""
    return any((s / "config.json").is_file() and has_tokenizer(s) and (random_init or has_weights(s))
               for s in cached_snapshots(name))


def looks_like_path(name: str) -> bool:
    """A name meant as a folder (./m, /models/m, ~/m, a/b/c), not a hub name (org/name)."""
    return name.startswith(("/", ".", "~")) or name.count("/") > 1


def download_warning(name: str, random_init: bool) -> str | None:
    """Said before a run whose model is a hub name this machine does not have: the run will
    download it (and, with no network, fail within seconds with this same advice). From the
    cache's files alone: no network call. ModelScope's cache layout changes between its
    versions, so with USE_MODELSCOPE_HUB=1 the advice is always given."""
    from ftui.rundir.paths import DEMO_MODEL

    name = name.strip()
    if not name or name == DEMO_MODEL or looks_like_path(name) or is_folder(name) or hub_offline():
        return None  # a folder is checked by validation; offline, a missing model is an error there
    if use_modelscope():
        return None if modelscope_missing() else hub_unreachable_advice(name)  # missing: validation refuses it
    return None if cached_for_run(name, random_init) else hub_unreachable_advice(name)


def hub_unreachable_advice(name: str) -> str:
    """What to do when a hub model is not on this machine and the hub may not be reachable:
    the form's warning before a run and the failed run's hint say the same."""
    if use_modelscope():
        return _("{name} is not a local folder: with USE_MODELSCOPE_HUB=1 the run downloads it from ModelScope "
                 "({endpoint}) unless the modelscope cache has it; with no network give a local path (a folder with config.json, "
                 "weights and tokenizer), set MODELSCOPE_ENDPOINT to a mirror, or download it where there is network and set "
                 "HF_HUB_OFFLINE=1 to load it from the modelscope cache").format(name=name, endpoint=shown_endpoint(modelscope_endpoint()))
    return _("{name} is not a local folder and not in the hub cache ({cache}): the run downloads it from "
             "{endpoint}; with no network give a local path (a folder with config.json, weights and tokenizer), "
             "set HF_ENDPOINT to a mirror, or download it where there is network and set HF_HUB_OFFLINE=1").format(
        name=name, cache=hub_cache_dir(), endpoint=shown_endpoint(hub_endpoint()))
