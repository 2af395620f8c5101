"""Hubs: an unreachable hub fails within seconds with a hint; USE_MODELSCOPE_HUB=1 downloads
through the modelscope package (monkeypatched here: no network)."""

from __future__ import annotations

import importlib.machinery
import os
import sys
import threading
import types
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

from conftest import tiny_config, train_sync
from ftui.config.problems import ConfigError
from ftui.config.load import parse_config
from ftui.plan.model_files import download_warning
from ftui.runner import hub


@pytest.fixture(autouse=True)
def _fresh(monkeypatch, tmp_path):
    """No cached answers between tests, an empty hub cache, online unless a test says not."""
    hub.model_source.cache_clear()
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub-cache"))
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "USE_MODELSCOPE_HUB", "HF_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    constants = sys.modules.get("huggingface_hub.constants")
    if constants is not None:
        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    yield
    hub.model_source.cache_clear()


def cache_model(tmp_path: Path, name: str) -> Path:
    snapshot = tmp_path / "hub-cache" / ("models--" + name.replace("/", "--")) / "snapshots" / "abc"
    snapshot.mkdir(parents=True)
    for f in ("config.json", "tokenizer.json", "model.safetensors"):
        (snapshot / f).write_text("{}")
    return snapshot


def test_unreachable_hub_and_no_cache_fails_at_once_with_a_hint(monkeypatch):
    monkeypatch.setattr(hub, "reachable", lambda url, timeout=hub.PROBE_TIMEOUT_S: False)
    with pytest.raises(hub.HubUnreachable) as err:
        hub.model_source("someorg/somemodel")
    assert "could not be reached" in str(err.value)
    assert "HF_ENDPOINT" in err.value.hint and "local path" in err.value.hint


def test_unreachable_hub_loads_a_cached_model_offline(monkeypatch, tmp_path):
    monkeypatch.setattr(hub, "reachable", lambda url, timeout=hub.PROBE_TIMEOUT_S: False)
    cache_model(tmp_path, "someorg/cached")
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")  # restored after the test
    assert hub.model_source("someorg/cached") == "someorg/cached"
    assert os.environ["HF_HUB_OFFLINE"] == "1"


def test_local_folders_and_offline_mode_never_probe(monkeypatch, tmp_path):
    monkeypatch.setattr(hub, "reachable", lambda *a, **k: pytest.fail("probed"))
    assert hub.model_source(str(tmp_path)) == str(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert hub.model_source("someorg/somemodel") == "someorg/somemodel"  # transformers reads the cache


class _NotFound(BaseHTTPRequestHandler):
    def do_HEAD(self):  # noqa: N802
        self.send_response(404)
        self.end_headers()

    def log_message(self, *args):
        pass


def test_reachable_tells_an_answer_from_no_answer():
    server = HTTPServer(("127.0.0.1", 0), _NotFound)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        assert hub.reachable(f"http://127.0.0.1:{server.server_port}/")  # any status is an answer
    finally:
        server.shutdown()
        server.server_close()
    assert not hub.reachable(f"http://127.0.0.1:{server.server_port}/", timeout=2)  # closed now: refused
    assert not hub.reachable("not a url")


def fake_modelscope(monkeypatch, tmp_path: Path, fail: bool = False) -> list[dict]:
    calls: list[dict] = []

    def snapshot_download(model_id, local_files_only=False, **kwargs):
        calls.append({"model_id": model_id, "local_files_only": local_files_only})
        if fail:
            raise ValueError("Cannot find the requested files in the cached path")
        return str(tmp_path / "ms-cache" / model_id)

    module = types.ModuleType("modelscope")
    module.__spec__ = importlib.machinery.ModuleSpec("modelscope", None)
    module.snapshot_download = snapshot_download
    monkeypatch.setitem(sys.modules, "modelscope", module)
    monkeypatch.setenv("USE_MODELSCOPE_HUB", "1")
    return calls


def test_modelscope_downloads_through_its_package(monkeypatch, tmp_path):
    calls = fake_modelscope(monkeypatch, tmp_path)
    monkeypatch.setattr(hub, "reachable", lambda url, timeout=hub.PROBE_TIMEOUT_S: url.startswith("https://modelscope.cn"))
    assert hub.model_source("Qwen/Qwen2.5-0.5B") == str(tmp_path / "ms-cache" / "Qwen/Qwen2.5-0.5B")
    assert calls == [{"model_id": "Qwen/Qwen2.5-0.5B", "local_files_only": False}]


@pytest.mark.parametrize("offline", [True, False])
def test_modelscope_offline_or_unreachable_reads_its_cache_only(monkeypatch, tmp_path, offline):
    calls = fake_modelscope(monkeypatch, tmp_path, fail=True)
    monkeypatch.setattr(hub, "reachable", lambda url, timeout=hub.PROBE_TIMEOUT_S: False)
    if offline:
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(hub.HubUnreachable) as err:
        hub.model_source("Qwen/Qwen2.5-0.5B")
    assert calls == [{"model_id": "Qwen/Qwen2.5-0.5B", "local_files_only": True}]
    assert "modelscope cache" in str(err.value) and "MODELSCOPE_ENDPOINT" in err.value.hint


def test_modelscope_without_its_package_is_refused(monkeypatch):
    monkeypatch.setitem(sys.modules, "modelscope", None)  # import fails, find_spec finds nothing
    monkeypatch.setenv("USE_MODELSCOPE_HUB", "1")
    with pytest.raises(ConfigError) as err:
        parse_config({"model_name_or_path": "Qwen/Qwen2.5-0.5B", "dataset": "ftui_demo"})
    assert "pip install modelscope" in str(err.value)
    with pytest.raises(hub.HubProblem) as err:
        hub.model_source("Qwen/Qwen2.5-0.5B")
    assert "pip install modelscope" in str(err.value)
    assert download_warning("Qwen/Qwen2.5-0.5B", False) is None  # validation says it; no second message


@pytest.mark.dist
def test_a_run_whose_hub_cannot_be_reached_ends_with_the_hint(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens: refused at once
    cfg = tiny_config(tmp_path, model_name_or_path="someorg/somemodel")
    _run_dir, events, proc = train_sync(cfg)
    end = events[-1]
    assert proc.returncode != 0 and end["event"] == "run_end" and end["status"] == "failed"
    assert "could not be reached and someorg/somemodel is not in the hub cache" in end["reason"]
    assert "HF_ENDPOINT" in end["hint"]
