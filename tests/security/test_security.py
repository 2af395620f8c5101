"""Security: nothing escapes the runs root, run directories are private, secrets are not
written down, remote code and pickles stay off, untrusted text is never markup, the app
listens on no port and a run on nothing beyond loopback. The one exception: a serve job
(``ftui serve``) listens on its one port (127.0.0.1 unless told otherwise, any other address
only with an API key), through uvicorn in ``ftui/runner/serve*.py`` alone."""

import ast
import contextlib
import json
import stat
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import yaml

from ftui.rundir.events import make_event
from ftui.rundir.paths import EVENTS_FILE
from ftui.rundir.launch_record import create_run_dir
from ftui.rundir.resolve import resolve_run
from ftui.config.problems import ConfigError
from ftui.config.schema import RunConfig
from ftui.config.load import parse_config
from tests.fixtures_runs import T0, fixed_sampler, write_run

FTUI = [sys.executable, "-m", "ftui.cli.main"]
PACKAGE = Path(__file__).resolve().parents[2] / "ftui"


@pytest.mark.parametrize("name", ["../escape", "/etc", "a/b", "..", ".hidden", "x\x00y", "a b", "-flag", "x" * 100])
def test_run_names_that_could_escape_are_refused(name):
    with pytest.raises(ConfigError) as info:
        parse_config({"model_name_or_path": "org/m", "dataset": "x", "run_name": name})
    assert [p.field for p in info.value.problems] == ["run_name"]


def test_run_directories_stay_under_the_root_whatever_the_label(tmp_path):
    root = tmp_path / "runs"
    for label in ("../../outside", "/etc/passwd", "a/../../b", "..", "~"):
        d = create_run_dir(root, label)
        assert d.resolve().parent == root.resolve(), label
    assert not (tmp_path / "outside").exists() and sorted(p.name for p in tmp_path.iterdir()) == ["runs"]


def test_a_planted_symlink_is_never_followed(tmp_path, monkeypatch):
    import time

    monkeypatch.setattr(time, "strftime", lambda fmt, *a: "20260101-000000")
    root, target = tmp_path / "runs", tmp_path / "elsewhere"
    root.mkdir()
    target.mkdir()
    (root / "demo-20260101-000000").symlink_to(target)
    d = create_run_dir(root, "demo")
    assert d.name == "demo-20260101-000000-2" and not d.is_symlink()
    assert list(target.iterdir()) == []


def test_run_ids_are_looked_up_under_the_root_only(tmp_path, monkeypatch):
    """A bare id (no slash) never resolves outside the root, whatever lies beside it."""
    outside = tmp_path / "secret-run"
    outside.mkdir()
    (outside / "config.yaml").write_text("model_name_or_path: x\n")
    root = tmp_path / "runs"
    root.mkdir()
    (root / "ok-run").mkdir()
    (root / "ok-run" / "config.yaml").write_text("model_name_or_path: x\n")
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    for ref in ("secret", "secret-run", "..", ".", ""):
        with pytest.raises(LookupError):
            resolve_run(ref, root)
    assert resolve_run("ok", root) == root / "ok-run"


def test_run_directory_is_owner_only_and_holds_no_secret(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_envsecret123456")
    monkeypatch.setenv("WANDB_API_KEY", "wandbsecret7890")
    conf = tmp_path / "c.yaml"
    conf.write_text(yaml.safe_dump({
        "model_name_or_path": "ftui-demo", "model_init": "random", "dataset": "ftui_demo", "finetuning_type": "full",
        "device": "cpu", "cutoff_len": 128,  # the demo model has 512 positions
        "max_steps": 2, "max_samples": 8, "per_device_train_batch_size": 4, "logging_steps": 1,
        "output_dir": str(tmp_path / "runs"), "hf_hub_token": "hf_cfgsecret654321", "report_to": "none",
    }))
    proc = subprocess.run([*FTUI, "train", str(conf)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (run,) = (tmp_path / "runs").iterdir()
    assert stat.S_IMODE(run.stat().st_mode) == 0o700
    for f in run.rglob("*"):
        if f.is_file():
            data = f.read_bytes()
            for secret in (b"hf_envsecret123456", b"wandbsecret7890", b"hf_cfgsecret654321"):
                assert secret not in data, f"{secret!r} written into {f.relative_to(run)}"
    launch = json.loads((run / "launch.json").read_text())
    assert launch.get("env", {}).get("HF_TOKEN", "<redacted>") == "<redacted>"


def test_trust_remote_code_is_off_unless_set_and_said_when_on(tmp_path):
    assert RunConfig(model_name_or_path="m", dataset="d").trust_remote_code is False
    proc = subprocess.run([*FTUI, "plan", "--preset", "demo", "--set", "trust_remote_code=true"], capture_output=True, text=True, timeout=60)
    assert "trust_remote_code is on" in proc.stderr


async def test_the_form_says_when_remote_code_is_on(tmp_path):
    from textual.widgets import Switch

    from ftui.tui.app import FtuiApp
    from tests.test_tui_pilot import until

    app = FtuiApp(tmp_path / "runs", sampler=fixed_sampler, offer_live=False, render_examples=False)
    async with app.run_test(size=(100, 40)) as pilot:
        screen = app.screen
        await until(pilot, lambda: screen._ready)
        screen.fill({"model_name_or_path": "ftui-demo", "dataset": "ftui_demo"})
        screen.query_one("#f-trust_remote_code", Switch).value = True
        # the form validates in a worker: wait for its verdict (a loaded machine took over 0.5 s)
        status = screen.query_one("#status-line")
        await until(pilot, lambda: "trust_remote_code is ON" in str(status.render()))


def _calls(tree):
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
            owner = f.value.id if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) else ""
            yield owner, name, {k.arg: k.value for k in node.keywords}


def test_no_pickle_no_unsafe_yaml_in_the_package():
    """Static check of every module: weights load with weights_only=True (or safetensors),
    YAML through safe_load, and nothing imports pickle, dill, marshal or shelve."""
    for path in PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [a.name for a in node.names] + ([node.module] if isinstance(node, ast.ImportFrom) and node.module else [])
                assert not {"pickle", "dill", "marshal", "shelve", "cloudpickle"} & {n.split(".")[0] for n in names}, path
        for owner, name, kw in _calls(tree):
            if owner == "torch" and name == "load":
                assert isinstance(kw.get("weights_only"), ast.Constant) and kw["weights_only"].value is True, f"{path}: torch.load without weights_only=True"
            if owner == "yaml" and name == "load" and path.name == "bounded_input.py":
                # the one yaml.load: safe_load's own call with its bounded SafeLoader subclass
                loader = kw.get("Loader")
                assert isinstance(loader, ast.Name), f"{path}: yaml.load without a named Loader"
                from ftui.safety import bounded_input
                assert issubclass(getattr(bounded_input, loader.id), yaml.SafeLoader), f"{path}: yaml.load with {loader.id}"
            elif owner == "yaml":
                assert name not in ("load", "load_all", "unsafe_load", "full_load"), f"{path}: yaml.{name}"
            if name == "from_pretrained" and "trust_remote_code" in kw:
                v = kw["trust_remote_code"]
                assert not (isinstance(v, ast.Constant) and v.value is True), f"{path}: trust_remote_code=True hard-coded"


async def test_untrusted_text_is_literal_in_every_widget(tmp_path):
    """Markup-looking text from a model name, a log, a failure, a run's reason and a dataset
    is shown as written: in the dashboard header, log pane, end banner, runs list and the
    form's dataset preview."""
    from ftui.tui.app import FtuiApp
    from ftui.tui.screens.runs import RunsScreen
    from tests.test_tui_pilot import text_of, until

    nasty = "[bold red]boom[/] [link=file:///etc/passwd]x[/link]"
    run = write_run(tmp_path / "runs", "nasty", steps=10, max_steps=100, end="failed", model=f"org/{nasty}",
                    log_lines=(f"log {nasty}",))
    with open(run / EVENTS_FILE, "a") as fh:  # a second failure text, in the fields a crash fills
        fh.write(json.dumps(make_event("log", t=T0 + 5, level="warning", message=f"warn {nasty}")) + "\n")
    events = (run / EVENTS_FILE).read_text().replace("CUDA out of memory", f"CUDA out of memory {nasty}")
    (run / EVENTS_FILE).write_text(events)
    data = tmp_path / "data.json"
    data.write_text(json.dumps([{"instruction": f"q {nasty}", "input": "", "output": f"a {nasty}"}]))

    app = FtuiApp(tmp_path / "runs", attach=run, clock=lambda: T0 + 100, sampler=fixed_sampler, offer_live=False)
    async with app.run_test(size=(160, 50)) as pilot:
        dash = app.screen
        await until(pilot, lambda: dash.view is not None and dash.view.status == "failed")
        await until(pilot, lambda: any(nasty in s.text for s in dash.query_one("#log-tail").lines))
        assert nasty in text_of(dash.query_one("#run-header"))
        assert nasty in text_of(dash.query_one("#end-banner"))
        app.push_screen(RunsScreen(tmp_path / "runs"))
        await pilot.pause(1.0)
        table = app.screen.query_one("DataTable")
        cells = " ".join(str(c) for row in range(table.row_count) for c in table.get_row_at(row))
        assert "[bold red]boom[/]" in cells
    app = FtuiApp(tmp_path / "runs", sampler=fixed_sampler, offer_live=False, render_examples=False)
    async with app.run_test(size=(160, 50)) as pilot:
        screen = app.screen
        await until(pilot, lambda: screen._ready)
        screen.fill({"dataset": str(data), "dataset_dir": str(tmp_path)})
        screen.preview_dataset(str(data), str(tmp_path))
        await until(pilot, lambda: f"q {nasty}"[:40] in text_of(screen.query_one("#preview")))


class WritesAMarker:
    """A hostile pickle: unpickling it creates ``path`` (a command would run the same way)."""

    def __init__(self, path: Path):
        self.path = path

    def __reduce__(self):
        return (open, (str(self.path), "w"))


def listening_sockets(processes: list[psutil.Process]) -> list:
    out = []
    for p in processes:
        try:
            out += [c for c in p.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN]
        except psutil.Error:
            continue
    return out


PLANT = """
import datetime, sys
import torch.distributed as dist
store = dist.TCPStore("127.0.0.1", int(sys.argv[1]), is_master=False, timeout=datetime.timedelta(seconds=10), wait_for_workers=False)
for key in sys.argv[3:]:
    store.set(key, sys.argv[2])
"""


def try_hostile_pickles(ports: list[int], processes: list[psutil.Process], marker: Path) -> None:
    """What an attacker on this machine would do: join each listening port as a torch store
    client and put a pickle where a rendezvous would read one (torchrun's c10d rendezvous
    unpickles ``torch.rendezvous.<run id>`` at every keep-alive). From a process of its own:
    on a port that is not a torch store the client waits for an answer that never comes."""
    import pickle
    from base64 import b64encode

    run_ids = {"default", "none"}
    for p in processes:
        try:
            run_ids.add(p.environ().get("TORCHELASTIC_RUN_ID", "none"))
        except psutil.Error:
            continue
    payload = b64encode(pickle.dumps(WritesAMarker(marker))).decode()
    keys = [f"torch.rendezvous.{run_id}" for run_id in sorted(run_ids)]
    # One client per port, all at once (a client on a port that is not a store waits until it
    # is killed: one after another they took 15 s a port), each given the same 15 s.
    clients = [subprocess.Popen([sys.executable, "-c", PLANT, str(port), payload, *keys],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for port in ports]
    deadline = time.monotonic() + 15
    for client in clients:
        try:
            client.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            client.kill()
            client.wait()


@pytest.mark.dist
@pytest.mark.parametrize("nproc", [pytest.param(1, marks=pytest.mark.slow), 2])  # 1: no group, no socket at all (CI time)
def test_a_run_listens_on_no_port_beyond_loopback_and_runs_no_planted_pickle(tmp_path, nproc):
    """The whole process tree of a training run (supervisor, launcher, ranks): one process
    listens on nothing; two ranks at most on loopback, meeting through a private file in the
    0700 run directory; a hostile pickle written to any port the tree opens never runs."""
    from conftest import tiny_config, wait_for
    from ftui.jobs.launch import run_processes, stop_run
    from tests.faults.test_process_faults import start_detached
    from tests.test_launch import steps_written

    run = start_detached(tmp_path, tiny_config(tmp_path, engine="ddp" if nproc > 1 else "single", nproc_per_node=nproc,
                                               max_steps=100000, logging_steps=1))
    marker = tmp_path / "pwned"
    try:
        assert wait_for(lambda: steps_written(run) >= 2, timeout=180)
        sup, children = run_processes(run)
        tree = [sup, *children]
        for proc in children:  # what follows waits on sockets, not steps: leave the cores to the
            with contextlib.suppress(psutil.Error):  # suite's other worker meanwhile (CI time)
                proc.nice(10)
        watcher = subprocess.Popen([*FTUI, "watch", str(run)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_for(lambda: False, timeout=3)  # let `ftui watch` start up
            assert listening_sockets([psutil.Process(watcher.pid)]) == []
        finally:
            watcher.kill()
        listening = listening_sockets(tree)
        if nproc == 1:
            assert listening == []
        assert [c.laddr for c in listening if c.laddr.ip not in ("127.0.0.1", "::1")] == []
        stores = [p for p in run.iterdir() if p.name.startswith(".store-")]
        assert len(stores) == 1 and stat.S_IMODE(stores[0].stat().st_mode) == 0o600
        assert stat.S_IMODE(run.stat().st_mode) == 0o700
        try_hostile_pickles(sorted({c.laddr.port for c in listening}), tree, marker)
        # torchrun's rendezvous read its state back every 5 s; the run must carry on regardless.
        reached = steps_written(run) + 2
        assert not wait_for(marker.exists, timeout=8)
        assert wait_for(lambda: steps_written(run) >= reached, timeout=180)
    finally:
        stop_run(run, force=True)
    assert not marker.exists()


def serve_runner(path: Path) -> bool:
    """ftui/runner/serve*.py: the serve job, whose one port is the exception."""
    rel = path.relative_to(PACKAGE)
    return rel.parts[0] == "runner" and len(rel.parts) == 2 and rel.name.startswith("serve")


def test_the_package_opens_no_server_socket():
    """No code of the package binds, listens or starts a server itself: the serve job's one
    socket is bound by uvicorn (its Config.bind_socket), in ftui/runner/serve*.py alone (the test below)."""
    for path in PACKAGE.rglob("*.py"):
        src = path.read_text()
        for needle in (".bind(", ".listen(", "socketserver", "http.server", "asyncio.start_server", "create_server"):
            assert needle not in src, f"{path}: {needle}"


SERVER_PACKAGES = ("fastapi", "uvicorn", "sse_starlette", "starlette")


def test_only_the_serve_runner_imports_the_http_server_packages():
    """The serve job's port is the one socket a ftui process listens on: fastapi, uvicorn,
    sse-starlette (and starlette under them) are imported by ftui/runner/serve*.py alone."""
    found = []
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE)
        if serve_runner(path):
            continue
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            found += [f"{rel}: {name}" for name in names if name.split(".")[0] in SERVER_PACKAGES]
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) in ("import_module", "__import__") \
                    and node.args and isinstance(node.args[0], ast.Constant) and str(node.args[0].value).split(".")[0] in SERVER_PACKAGES:
                found.append(f"{rel}: {node.args[0].value}")
    assert not found
