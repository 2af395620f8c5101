"""``ftui serve``'s side outside the server: the serve job's directory (job.json as the runner
reads it, never the key), every refusal said before the directory exists, the CLI's exit
codes, ``ftui watch`` / the follower's lines from a serve job's events, and ``ftui stop``."""

from __future__ import annotations

import io
import json
import os
import sys
import time
from pathlib import Path

import pytest
from rich.console import Console

from ftui.cli.main import main
from ftui.jobs.serve_job import ServeJobError, is_loopback, prepare_serve_job, served_url
from ftui.rundir.event_writer import EventWriter
from ftui.rundir.job_kinds import KINDS, SERVING

from fixtures_runs import T0

KEY = "sk-ftui-test-7f3a9c"  # must appear in no file of a job


def adapter(path: Path, base: str) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": base, "peft_type": "LORA", "r": 8}))
    return path


@pytest.fixture
def run(tmp_path) -> Path:
    """A LoRA run on a random-weight base as the demo leaves it: base_model/ and final/ (an
    adapter on base_model/); no weights are loaded here."""
    run = tmp_path / "runs" / "demo-20261128-090000"
    (run / "base_model").mkdir(parents=True)
    (run / "base_model" / "config.json").write_text("{}")
    (run / "config.yaml").write_text("model_name_or_path: ftui-demo\ndataset: ftui_demo\nmodel_init: random\ncutoff_len: 128\n")
    adapter(run / "final", str((run / "base_model").resolve()))
    return run


@pytest.fixture(autouse=True)
def no_key_env(monkeypatch):
    for name in ("FTUI_API_KEY", "API_KEY"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def started(monkeypatch):
    """start_job without a server: what it was given."""
    from ftui.jobs import offline

    calls = []
    monkeypatch.setattr(offline, "start_job", lambda kind, job_dir, cfg: calls.append((kind, job_dir, cfg)) or {"pid": 1})
    return calls


def serve_dirs(run: Path) -> list[Path]:
    folder = run / "serve"
    return sorted(folder.iterdir()) if folder.is_dir() else []


def prepare(run: Path, **kw):
    from ftui.jobs.offline import source_of

    return prepare_serve_job(run_dir=run, source=source_of(run, None, False, None, None), **kw)


# --- job.json


def test_job_json_is_the_agreed_interface_and_holds_no_key(run, tmp_path, monkeypatch):
    monkeypatch.setenv("FTUI_API_KEY", KEY)
    key_file = tmp_path / "key"
    key_file.write_text(KEY + "\n")
    other = adapter(tmp_path / "other", str(run / "base_model"))
    job_dir, cfg = prepare(run, served_name="demo", adapters=[("second", str(other)), ("again", str(run))], host="0.0.0.0",
                           port=0, api_key_file=str(key_file), queue_size=4, max_tokens_limit=64)
    spec = json.loads((job_dir / "job.json").read_text())
    assert job_dir.parent == run.resolve() / "serve" and oct(job_dir.stat().st_mode & 0o777) == "0o700"
    assert spec["job"] == "serve" and spec["source"] == {"run": str(run.resolve()), "checkpoint": None, "base": False}
    assert spec["source_label"] == f"{run.name} final" and spec["served_name"] == "demo"
    assert spec["adapters"] == [{"name": "second", "path": str(other.resolve())},
                                {"name": "again", "path": str((run / "final").resolve())}]  # a run: its final/
    assert (spec["host"], spec["port"], spec["api_key_file"]) == ("0.0.0.0", 0, str(key_file.resolve()))
    assert (spec["queue_size"], spec["max_tokens_limit"], spec["max_body_bytes"]) == (4, 64, 1 << 20)
    assert spec["generation"] == {"max_new_tokens": 64, "temperature": 0.95, "top_p": 0.7}  # the default cut to the limit
    assert spec["device"] == "auto" and spec["run"] == str(run.resolve()) and isinstance(spec["created"], float)
    assert cfg.nproc_per_node == 1 and cfg.engine == "single" and (job_dir / "config.yaml").is_file()
    assert not any(KEY in p.read_text() for p in job_dir.iterdir())


def test_the_served_name_defaults_to_the_runs_name(run):
    job_dir, _cfg = prepare(run)
    spec = json.loads((job_dir / "job.json").read_text())
    assert spec["served_name"] == run.name and spec["adapters"] == [] and spec["api_key_file"] is None
    assert (spec["host"], spec["port"], spec["queue_size"], spec["max_batch"]) == ("127.0.0.1", 8000, 8, 8)


def test_launch_json_holds_no_key_either(run, monkeypatch):
    """The real launcher (a runner that exits at once stands in for the server): the
    environment launch.json records has the key's variable blanked, and no file has the key."""
    from ftui.jobs import launch
    from ftui.ops.serve import start_serve
    from ftui.rundir.liveness import wait_until_gone

    monkeypatch.setenv("FTUI_API_KEY", KEY)
    monkeypatch.setattr(launch, "launch_command", lambda cfg, run_dir, python=None, resume=None, job="train": [
        sys.executable, "-c", "pass"])
    job_dir = start_serve(run_dir=run, host="0.0.0.0", port=0).job_dir
    assert wait_until_gone(job_dir, 60)
    record = json.loads((job_dir / "launch.json").read_text())
    assert record["env"]["FTUI_API_KEY"] == "<redacted>"
    assert not [p.name for p in job_dir.iterdir() if p.is_file() and KEY in p.read_text(errors="replace")]


# --- refusals: each said, nothing made


def refused(run: Path, says: str, **kw) -> None:
    with pytest.raises(ServeJobError) as err:
        prepare(run, **kw)
    assert says in str(err.value), str(err.value)
    assert serve_dirs(run) == []


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.5", "myhost"])
def test_beyond_loopback_without_a_key_is_refused_naming_the_flag_and_the_variable(run, host):
    refused(run, "--api-key-file", host=host)
    with pytest.raises(ServeJobError, match="FTUI_API_KEY"):
        prepare(run, host=host)


@pytest.mark.parametrize("host", ["127.0.0.1", "::1", "localhost", "127.0.0.2"])
def test_loopback_needs_no_key(run, host):
    assert is_loopback(host)
    prepare(run, host=host)


@pytest.mark.parametrize("variable", ["FTUI_API_KEY", "API_KEY"])
def test_a_key_in_the_environment_allows_any_address(run, monkeypatch, variable):
    monkeypatch.setenv(variable, KEY)
    job_dir, _cfg = prepare(run, host="0.0.0.0")
    assert KEY not in (job_dir / "job.json").read_text()


def test_a_blank_key_in_the_environment_is_no_key(run, monkeypatch):
    monkeypatch.setenv("FTUI_API_KEY", "  \n")
    refused(run, "--api-key-file", host="0.0.0.0")


def test_key_files_that_cannot_give_a_key_are_refused(run, tmp_path):
    empty, folder = tmp_path / "empty", tmp_path / "folder"
    empty.write_text("\n")
    folder.mkdir()
    refused(run, "does not exist", api_key_file=str(tmp_path / "nosuch"))
    refused(run, "is empty", api_key_file=str(empty))
    refused(run, "is a directory", api_key_file=str(folder), host="0.0.0.0")
    if os.geteuid() != 0:  # root reads any file
        locked = tmp_path / "locked"
        locked.write_text(KEY)
        locked.chmod(0)
        refused(run, "cannot read the API key file", api_key_file=str(locked))


@pytest.mark.parametrize("kw,says", [
    ({"port": -1}, "0 to 65535"), ({"port": 65536}, "0 to 65535"),
    ({"queue_size": -1}, "0 to 1024"), ({"queue_size": 1025}, "0 to 1024"),
    ({"max_batch": 0}, "--batch 0: requests generated together are 1 to 64"), ({"max_batch": 65}, "1 to 64"),
    ({"max_tokens_limit": 0}, "--max-tokens 0: must be 1 to 10000000"), ({"max_tokens_limit": 10**9}, "must be 1 to"),
    ({"max_body_bytes": 10}, "1024 to 1073741824 bytes"),
    ({"host": ""}, "--host"), ({"host": "a b"}, "--host"),
    ({"served_name": ""}, "1 to 64 characters"), ({"served_name": "x" * 65}, "1 to 64 characters"),
    ({"served_name": "bad name"}, "1 to 64 characters"), ({"served_name": "[red]x"}, "1 to 64 characters"),
    ({"device": "tpu"}, "auto, cpu or cuda"),
    ({"generation": {"infer_backend": "vllm"}}, "vllm"), ({"generation": {"infer_backend": "sglang"}}, "sglang"),
    ({"generation": {"infer_backend": "nosuch"}}, "huggingface"),
])
def test_settings_out_of_range_are_refused(run, kw, says):
    refused(run, says, **kw)


def test_a_runs_infer_backend_vllm_is_refused_by_name(run):
    """Refused by the job's check or by the config's own (either way before any directory)."""
    from ftui.ops.errors import JobRefused
    from ftui.ops.serve import start_serve

    (run / "config.yaml").write_text((run / "config.yaml").read_text() + "infer_backend: vllm\n")
    with pytest.raises(JobRefused, match="vllm"):
        start_serve(run_dir=run)
    assert serve_dirs(run) == []


def test_lora_names_and_paths_are_checked(run, tmp_path):
    good = adapter(tmp_path / "good", str(run / "base_model"))
    refused(run, "1 to 64 characters", adapters=[("no way", str(good))])
    refused(run, "served already", served_name="m", adapters=[("m", str(good))])
    refused(run, "served already", adapters=[("a", str(good)), ("a", str(good))])
    refused(run, "not a LoRA adapter directory", adapters=[("a", str(tmp_path))])
    full = tmp_path / "full-run"
    (full / "final").mkdir(parents=True)
    (full / "config.yaml").write_text("model_name_or_path: ftui-demo\ndataset: ftui_demo\n")
    refused(run, "holds no LoRA adapter", adapters=[("a", str(full))])


def test_an_adapter_on_another_base_is_refused_naming_both(run, tmp_path):
    other = adapter(tmp_path / "other", "Qwen/Qwen2.5-0.5B")
    with pytest.raises(ServeJobError) as err:
        prepare(run, adapters=[("other", str(other))])
    assert "Qwen/Qwen2.5-0.5B" in str(err.value) and str((run / "base_model").resolve()) in str(err.value)
    assert serve_dirs(run) == []


def test_the_url_a_client_uses():
    assert served_url("127.0.0.1", 8000) == "http://127.0.0.1:8000/v1"
    assert served_url("::1", 9) == "http://[::1]:9/v1"


# --- the CLI


def test_ftui_serve_detached_starts_the_job_and_says_how_to_stop_it(run, started, capsys):
    assert main(["serve", str(run), "--port", "0", "--served-name", "demo", "--detach"]) == 0
    (kind, job_dir, _cfg), = started
    out = " ".join(capsys.readouterr().out.split())
    assert kind == "serve" and f"ftui watch {job_dir}" in out and f"ftui stop {job_dir}" in out
    assert json.loads((job_dir / "job.json").read_text())["port"] == 0


@pytest.mark.parametrize("args,says", [
    (["--host", "0.0.0.0"], "--api-key-file"),
    (["--lora", "nopath"], "NAME=PATH"),
    (["--checkpoint", "7"], "7"),
    (["--base", "--checkpoint", "1"], "not both"),
    (["--adapter", "x"], "go with --model"),
    (["--port", "70000"], "0 to 65535"),
])
def test_ftui_serve_refusals_exit_2_with_the_message_and_no_job(run, started, capsys, args, says):
    assert main(["serve", str(run), *args]) == 2
    assert says in " ".join(capsys.readouterr().err.split())
    assert started == [] and serve_dirs(run) == []


def test_ftui_serve_needs_a_run_or_a_model(started, capsys):
    assert main(["serve"]) == 2 and "give a run" in capsys.readouterr().err


def test_ftui_serve_of_a_model_directory_goes_under_the_runs_root(tmp_path, started):
    model = tmp_path / "my-model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"]}))
    (model / "model.safetensors").write_bytes(b"")
    (model / "tokenizer.json").write_text("{}")
    assert main(["serve", "--model", str(model), "--detach", "--root", str(tmp_path / "runs")]) == 0
    (_kind, job_dir, _cfg), = started
    spec = json.loads((job_dir / "job.json").read_text())
    assert job_dir.parent == tmp_path / "runs" / "serve" and spec["served_name"] == "my-model"
    assert spec["source"] == {"model": str(model.resolve()), "adapter": None} and spec["run"] is None


def test_ftui_serve_follows_the_server_and_ctrl_c_leaves_it_running(run, monkeypatch, capsys):
    """Without --detach: the URL line once serve_ready is there, a line per change of the
    counters; Ctrl-C stops following (exit 130), names ftui stop, and stops nothing."""
    from ftui.cli import follow
    from ftui.jobs import launch, offline

    import fcntl

    stops, locks = [], []
    monkeypatch.setattr(launch, "stop_run", lambda job_dir, force=False: stops.append(force) or "stopped")

    def start_job(kind, job_dir, cfg):  # the job's lock held as its supervisor holds it: the server lives
        locks.append(os.open(job_dir / "job.lock", os.O_CREAT | os.O_RDWR))
        fcntl.flock(locks[-1], fcntl.LOCK_EX)
        serve_events(job_dir, end=False)
        return {}

    monkeypatch.setattr(offline, "start_job", start_job)
    sleeps = []

    def sleep(_s):  # the second wait for new events: the user presses Ctrl-C
        sleeps.append(_s)
        if len(sleeps) == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(follow.time, "sleep", sleep)
    try:
        assert main(["serve", str(run), "--port", "0"]) == 130
    finally:
        for fd in locks:
            os.close(fd)
    captured = capsys.readouterr()
    out, err = " ".join(captured.out.split()), " ".join(captured.err.split())
    job_dir, = serve_dirs(run)
    assert "serving at http://127.0.0.1:43123/v1 (models: demo, second; no API key)" in out
    assert out.count("requests 3 answered 2 429s 1 errors 0 tok/s 12.5") == 1
    assert "stopped following; the server goes on" in err and f"ftui stop {job_dir}" in err and stops == []


def test_ftui_serve_exits_0_when_the_server_is_stopped_and_1_when_it_failed(run, monkeypatch, capsys):
    from ftui.jobs import offline

    monkeypatch.setattr(offline, "start_job", lambda kind, job_dir, cfg: serve_events(job_dir) and {})
    assert main(["serve", str(run), "--port", "0"]) == 0
    assert "stopped: served 5 requests" in capsys.readouterr().out

    def failed(kind, job_dir, cfg):
        with EventWriter(job_dir / "events.jsonl") as w:
            w.write("job_start", t=T0, run_id=job_dir.name, job="serve", source="s", precision="p", world_size=1)
            w.write("run_end", t=T0 + 1, status="failed", reason="port 8000 on 127.0.0.1 is in use; choose another with --port")
        return {}

    monkeypatch.setattr(offline, "start_job", failed)
    assert main(["serve", str(run)]) == 1
    assert "choose another with --port" in capsys.readouterr().out


# --- what the readers show


def serve_events(job: Path, end: bool = True) -> Path:
    job.mkdir(parents=True, exist_ok=True)
    (job / "config.yaml").write_text("model_name_or_path: m\ndataset: d\n")
    with EventWriter(job / "events.jsonl") as w:
        w.write("job_start", t=T0, run_id=job.name, job="serve", source="demo final", precision="float32", world_size=1,
                model="m", device="cpu", host="127.0.0.1", port=0, models=["demo"])
        w.write("serve_ready", t=T0 + 1, url="http://127.0.0.1:43123/v1", host="127.0.0.1", port=43123, models=["demo", "second"],
                key=False)
        stats = dict(requests=3, answered=2, rejected=1, errors=0, disconnected=0, active=0, queued=0, prompt_tokens=30,
                     generated_tokens=40, tokens_per_s=12.5, uptime_s=5.0)
        w.write("serve_stats", t=T0 + 2, **stats)
        w.write("serve_stats", t=T0 + 4, **{**stats, "uptime_s": 7.0})  # nothing a line shows changed: not printed again
        w.write("serve_stats", t=T0 + 6, **{**stats, "requests": 5, "answered": 4, "tokens_per_s": 0.0, "uptime_s": 9.0})
        if end:
            w.write("run_end", t=T0 + 8, status="stopped", reason="stopped: served 5 requests")
    return job


def test_ftui_watch_prints_the_url_then_a_line_per_change(tmp_path):
    from ftui.cli.watch import watch_run

    job = serve_events(tmp_path / "run" / "serve" / "s1")
    out = io.StringIO()
    assert watch_run(job, interval=0.01, out=out) == "stopped"
    assert out.getvalue().splitlines() == [
        "s1: serve demo final float32 host=127.0.0.1 port=0",
        "serving at http://127.0.0.1:43123/v1 (models: demo, second; no API key)",
        "requests 3 answered 2 429s 1 errors 0 tok/s 12.5",
        "requests 5 answered 4 429s 1 errors 0 tok/s 0.0",
        "stopped: stopped: served 5 requests",
    ]


def test_watch_of_a_long_lived_server_still_prints_its_url(tmp_path, monkeypatch):
    """A server's counters fill events.jsonl for days: watch starts at its tail, and the URL
    from the head is said all the same."""
    from ftui.cli import watch

    monkeypatch.setattr(watch, "HEAD_BYTES", 2048)
    monkeypatch.setattr(watch, "TAIL_BYTES", 2048)
    job = serve_events(tmp_path / "s1", end=False)
    with EventWriter(job / "events.jsonl") as w:
        for n in range(200):
            w.write("serve_stats", t=T0 + 10 + n, requests=10 + n, answered=10 + n, rejected=0, errors=0, disconnected=0, active=0,
                    queued=0, prompt_tokens=n, generated_tokens=n, tokens_per_s=1.0, uptime_s=10.0 + n)
        w.write("run_end", t=T0 + 300, status="stopped", reason="stopped: served 209 requests")
    out = io.StringIO()
    watch.watch_run(job, interval=0.01, out=out)
    lines = out.getvalue().splitlines()
    assert "serving at http://127.0.0.1:43123/v1 (models: demo, second; no API key)" in lines
    assert "requests 3 answered 2 429s 1 errors 0 tok/s 12.5" not in lines and lines[-2].startswith("requests 209 ")


def test_the_follower_prints_the_same_lines(tmp_path):
    from ftui.cli.follow import follow_run

    job = serve_events(tmp_path / "run" / "serve" / "s1")
    buffer = io.StringIO()
    summary = follow_run(job, console=Console(file=buffer, width=200), poll_s=0.01)
    text = buffer.getvalue()
    assert summary.job == "serve" and summary.status == "stopped"
    assert "serving demo final on 127.0.0.1:0" in text and "http://127.0.0.1:43123/v1" in text
    assert text.count("requests 3 answered 2 429s 1") == 1 and "requests 5 answered 4" in text
    assert "0/?" not in text and "━" not in text  # no bar: a server counts nothing towards an end


def test_hostile_serve_events_are_shown_as_text(tmp_path):
    from ftui.cli.watch import watch_run

    job = tmp_path / "s2"
    job.mkdir()
    (job / "config.yaml").write_text("model_name_or_path: m\ndataset: d\n")
    lines = [  # as a hostile file has them: not through the checked writer
        {"event": "job_start", "t": T0, "run_id": "s2", "job": "serve", "source": "x", "precision": "p", "world_size": 1},
        {"event": "serve_ready", "t": T0 + 1, "url": "http://\x1b[2Jevil/v1", "host": "h", "port": "80", "models": ["[red]m\x1b"],
         "key": True},
        {"event": "serve_stats", "t": T0 + 2, "requests": "many", "answered": -1, "rejected": [1]},
        {"event": "run_end", "t": T0 + 3, "status": "failed", "reason": "port 8000 on 127.0.0.1 is in use; choose another with --port"},
    ]
    (job / "events.jsonl").write_text("".join(json.dumps({"v": 1, **e}) + "\n" for e in lines))
    out = io.StringIO()
    watch_run(job, interval=0.01, out=out)
    lines = out.getvalue().splitlines()
    assert "\x1b" not in out.getvalue()
    assert lines[1] == "serving at ? (models: ?; an API key is required)" and lines[2].startswith("requests ? answered ?")


def test_a_serve_job_in_the_runs_list_and_the_registry(tmp_path):
    from ftui.rundir.follower import summarize_run
    from ftui.rundir.job_kinds import job_dirs
    from ftui.rundir.listing import list_row

    job = serve_events(tmp_path / "run" / "serve" / "s1")
    row = list_row(summarize_run(job))
    assert (row["method"], row["step"], row["status"]) == ("serve", "-", "stopped")
    assert job_dirs(tmp_path / "run") == [job] and KINDS["serve"].counts == SERVING and not KINDS["serve"].counted


def test_deleting_a_run_with_a_live_serve_job_is_refused(tmp_path):
    import fcntl

    from ftui.rundir.delete import RunDeleteError, delete_run

    run = tmp_path / "run"
    job = serve_events(run / "serve" / "s1", end=False)
    (run / "config.yaml").write_text("model_name_or_path: m\ndataset: d\n")
    (run / "events.jsonl").write_text("")
    fd = os.open(job / "job.lock", os.O_CREAT | os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)  # held as the server's supervisor holds it
    try:
        with pytest.raises(RunDeleteError, match="serve job running"):
            delete_run(run)
    finally:
        os.close(fd)
    assert job.is_dir()


# --- ftui stop


def test_ftui_stop_stops_a_live_job_and_says_when_nothing_runs(tmp_path, capsys):
    """A stand-in job (a supervisor whose launcher sleeps) is stopped by ftui stop JOB_DIR
    (exit 0, and it ends); stopping it again finds nothing running (exit 1)."""
    from ftui.config.schema import RunConfig
    from ftui.jobs import launch
    from ftui.rundir.liveness import wait_until_gone

    job = tmp_path / "run" / "serve" / "s1"
    job.mkdir(parents=True)
    cfg = RunConfig(model_name_or_path="ftui-demo", dataset="ftui_demo", output_dir=str(tmp_path))
    (job / "config.yaml").write_text("model_name_or_path: ftui-demo\ndataset: ftui_demo\n")
    original = launch.launch_command
    try:
        launch.launch_command = lambda cfg, run_dir, python=None, resume=None, job="train": [
            sys.executable, "-c", "import time; time.sleep(120)"]
        launch.start_run(job, cfg, job="serve")
    finally:
        launch.launch_command = original
    deadline = time.monotonic() + 30
    while not launch.run_processes(job)[1] and time.monotonic() < deadline:  # the launcher started
        time.sleep(0.05)
    (job / "job.json").write_text("{}")
    assert main(["stop", str(job)]) == 0
    assert "asked to stop; ftui watch" in capsys.readouterr().out
    assert wait_until_gone(job, 60)
    assert main(["stop", str(job)]) == 1
    assert "is not running" in capsys.readouterr().err
    assert main(["stop", str(tmp_path / "nosuch")]) == 2
