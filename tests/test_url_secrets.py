"""Issue 39, finding 10: a credential inside a URL (HF_ENDPOINT=https://user:token@mirror) is
blanked wherever ftui records or shows an environment value, the rest left readable."""

from __future__ import annotations

import json
import sys

from conftest import tiny_config, wait_for
from ftui.safety.url_secrets import redact_urls

TOKEN = "hf_s3cr3tT0kenValue"
ENDPOINT = f"https://user:{TOKEN}@mirror.example/hf"


def test_the_userinfo_of_every_url_is_blanked_and_the_rest_kept():
    assert redact_urls(ENDPOINT) == "https://***@mirror.example/hf"
    assert redact_urls("https://u:p@ss@host:8/p?q=a@b http://x@y") == "https://***@host:8/p?q=a@b http://***@y"
    for plain in ("https://mirror.example/hf", "https://host/a@b", "0,1", "user@host", ""):
        assert redact_urls(plain) == plain


def test_redact_env_blanks_urls_in_any_value_and_secret_names_whole():
    from ftui.jobs.launch import redact_env

    out = redact_env({"HF_ENDPOINT": ENDPOINT, "HF_TOKEN": "hf_abc", "CUDA_VISIBLE_DEVICES": "0,1"})
    assert out == {"HF_ENDPOINT": "https://***@mirror.example/hf", "HF_TOKEN": "<redacted>", "CUDA_VISIBLE_DEVICES": "0,1"}


def test_launch_json_records_the_endpoint_without_its_credentials(tmp_path, monkeypatch):
    """A real start_run (the launcher a stand-in): launch.json's env and the run's files."""
    from ftui.jobs import launch
    from ftui.jobs.launch import prepare_run, start_run

    monkeypatch.setenv("HF_ENDPOINT", ENDPOINT)
    cfg = tiny_config(tmp_path, device="cpu")
    run = prepare_run(cfg)
    monkeypatch.setattr(launch, "launch_command", lambda *a, **k: [sys.executable, "-c", "print('launched')"])
    info = start_run(run, cfg)
    assert info["env"]["HF_ENDPOINT"] == "https://***@mirror.example/hf"
    recorded = (run / "launch.json").read_text()
    assert json.loads(recorded)["env"]["HF_ENDPOINT"] == "https://***@mirror.example/hf" and TOKEN not in recorded
    assert wait_for(lambda: "launched" in (run / "train.log").read_text())
    assert not any(TOKEN in p.read_text(errors="replace") for p in run.rglob("*") if p.is_file())


def test_the_hub_advice_shows_the_mirror_without_its_credentials(monkeypatch):
    """The form's download warning and a failed run's hint say which endpoint a run downloads from."""
    from ftui.plan.model_files import hub_unreachable_advice

    monkeypatch.setenv("HF_ENDPOINT", ENDPOINT)
    monkeypatch.delenv("USE_MODELSCOPE_HUB", raising=False)
    advice = hub_unreachable_advice("org/model")
    assert "https://***@mirror.example/hf" in advice and TOKEN not in advice
    monkeypatch.setenv("USE_MODELSCOPE_HUB", "1")
    monkeypatch.setenv("MODELSCOPE_ENDPOINT", ENDPOINT)
    advice = hub_unreachable_advice("org/model")
    assert "https://***@mirror.example/hf" in advice and TOKEN not in advice


def test_a_failed_runs_reason_does_not_record_the_url_credentials(tmp_path):
    """A hub error quotes the URL it tried: run_end's reason and error_message blank its userinfo."""
    import subprocess

    from ftui.rundir.event_reader import read_all
    from ftui.jobs.launch import prepare_run

    run = prepare_run(tiny_config(tmp_path, device="cpu"))
    body = ("import sys\nfrom ftui.runner.job import run_job\n"
            "def body(*a):\n    raise OSError('could not reach " + ENDPOINT + "/api/models/x')\n"
            "sys.exit(run_job('train', body, [sys.argv[1]]))\n")
    proc = subprocess.run([sys.executable, "-c", body, str(run)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stderr[-2000:]
    end = [e for e in read_all(run / "events.jsonl") if e["event"] == "run_end"][-1]
    assert end["status"] == "failed" and "https://***@mirror.example/hf/api/models/x" in end["reason"]
    assert TOKEN not in json.dumps(end)
