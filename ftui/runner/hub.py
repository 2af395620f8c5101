"""Where a job's model comes from: a local folder, the Hugging Face hub (``HF_ENDPOINT``), or
ModelScope (``USE_MODELSCOPE_HUB=1``, LLaMA-Factory's switch).

A hub that cannot be reached is found out in seconds: one HEAD request with a short timeout
before anything downloads, where huggingface_hub would retry for about a minute before
failing. A model the cache already holds then loads from it (offline mode); one it does not
ends the job with :class:`HubUnreachable`, whose hint says what to do. ModelScope downloads go
through the ``modelscope`` package (an optional extra) into its own cache, and load from
there; under ``HF_HUB_OFFLINE`` only that cache is read.
"""

from __future__ import annotations

import functools
import os
import ssl
import sys
import urllib.error
import urllib.request

from ftui.i18n import _
from ftui.plan.model_files import (cached_for_run, hub_endpoint, hub_offline, hub_unreachable_advice, is_folder,
                              looks_like_path, modelscope_endpoint, modelscope_missing, shown_endpoint, use_modelscope)
from ftui.rundir.paths import resolve_model_path

PROBE_TIMEOUT_S = 5.0


class HubProblem(OSError):
    """A model that cannot be had from its hub; ``hint`` says what to do (the run_end's hint)."""

    def __init__(self, message: str, hint: str):
        super().__init__(message)
        self.hint = hint


class HubUnreachable(HubProblem):
    """The hub did not answer and the model is not in the cache."""


def reachable(url: str, timeout: float = PROBE_TIMEOUT_S) -> bool:
    """Whether ``url``'s server answers at all (any HTTP status counts: only a failure to
    connect, resolve or answer in time does not). A TLS failure counts as an answer: a proxy
    that re-signs certificates may still work for the hub's own client, so it decides."""
    try:
        urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=timeout).close()
    except urllib.error.HTTPError:
        return True
    except urllib.error.URLError as err:
        return isinstance(err.reason, ssl.SSLError)
    except ssl.SSLError:
        return True
    except (OSError, ValueError):  # timeouts, resets; ValueError: an endpoint that is no URL
        return False
    return True


@functools.lru_cache(maxsize=None)
def model_source(name: str) -> str:
    """What transformers loads for the config's ``model_name_or_path``: a folder as it is
    (the demo's name is its shipped folder), a ModelScope download's folder, or the hub name
    once the hub is known to answer (or the cache to hold it). Once per process and name."""
    path = resolve_model_path(name)
    if is_folder(path) or looks_like_path(path):
        return path  # a missing folder is transformers' (and validation's) to report
    if use_modelscope():
        return modelscope_snapshot(name)
    if hub_offline() or reachable(hub_endpoint()):
        return path
    if cached_for_run(name, random_init=True):  # weights too, when the run loads them: transformers says if not
        go_offline(_("the hub ({endpoint}) cannot be reached: loading {name} from the hub cache").format(endpoint=shown_endpoint(hub_endpoint()), name=name))
        return path
    raise HubUnreachable(_("the hub ({endpoint}) could not be reached and {name} is not in the hub cache").format(
        endpoint=shown_endpoint(hub_endpoint()), name=name), hub_unreachable_advice(name))


def go_offline(why: str) -> None:
    """Makes huggingface_hub (and transformers through it) read the cache only, at once,
    instead of retrying the network for each file. Its flag is read when it is imported,
    so it is set in the module too when that already happened."""
    print(f"[ftui] {why}", file=sys.stderr, flush=True)
    os.environ["HF_HUB_OFFLINE"] = "1"
    constants = sys.modules.get("huggingface_hub.constants")
    if constants is not None:
        constants.HF_HUB_OFFLINE = True


def modelscope_snapshot(name: str) -> str:
    """``name`` downloaded from ModelScope (or found in its cache) as a local folder, as
    LLaMA-Factory does with USE_MODELSCOPE_HUB=1."""
    missing = modelscope_missing()
    if missing:
        raise HubProblem(missing, _("pip install modelscope, or unset USE_MODELSCOPE_HUB"))
    from modelscope import snapshot_download

    offline = hub_offline()
    if not offline and not reachable(modelscope_endpoint()):
        offline = True
        print("[ftui] " + _("ModelScope ({endpoint}) cannot be reached: looking for {name} in its cache").format(
            endpoint=shown_endpoint(modelscope_endpoint()), name=name), file=sys.stderr, flush=True)
    try:
        return str(snapshot_download(name, local_files_only=offline))
    except Exception as err:  # modelscope's errors have no common base; any of them means no model
        if not offline:
            raise
        why = (_("{name} is not in the modelscope cache and ModelScope ({endpoint}) is not used (HF_HUB_OFFLINE): {error}")
               if hub_offline() else
               _("{name} is not in the modelscope cache and ModelScope ({endpoint}) could not be reached: {error}"))
        raise HubUnreachable(why.format(name=name, endpoint=shown_endpoint(modelscope_endpoint()), error=err), hub_unreachable_advice(name)) from err
