"""The app and Slurm runs (issue 45): the launch form's launcher and Slurm fields, a Start
that submits through ftui.ops, the dashboard of a queued and of a running Slurm run (its GPUs
on compute nodes: no NVML here, each rank's memory from the step events), the runs screen.

No cluster: run directories are made by hand (launch.json with a "scheduler") and a fake
``scontrol`` on the PATH prints a recorded ``scontrol -o show job`` line of Slurm 22.05."""

import json
import time
from pathlib import Path

import pytest
from textual.app import App
from textual.widgets import Button, Input, Label, Select, Switch

from ftui.rundir.events import make_event
from ftui.tui.screens.dashboard import DashboardScreen
from ftui.tui.screens.launch import LaunchScreen
from ftui.tui.state import RunView
from ftui.tui.widgets import EndBanner
from tests.fixtures_runs import T0, write_run
from tests.test_tui_pilot import make_app, open_form, open_runs, text_of, until

# A recorded line (Slurm 22.05.8, `scontrol -o show job ID`, one-node test cluster), with the
# job id, state, reason, times and node list as each test needs them
SCONTROL_LINE = (
    "JobId={job} JobName=ftui-qwen UserId=root(0) GroupId=root(0) MCS_label=N/A Priority=4294901757 Nice=0 "
    "Account=(null) QOS=(null) JobState={state} Reason={reason} Dependency=(null) Requeue=1 Restarts=0 BatchFlag=1 "
    "Reboot=0 ExitCode=0:0 RunTime=00:00:00 TimeLimit=04:00:00 TimeMin=N/A SubmitTime=2023-11-14T22:13:20 "
    "EligibleTime=2023-11-14T22:13:20 AccrueTime=2023-11-14T22:13:20 StartTime={start} EndTime=2023-11-15T03:00:00 "
    "Deadline=N/A SuspendTime=None SecsPreSuspend=0 LastSchedEval=2023-11-14T22:13:21 Scheduler=Backfill "
    "Partition=debug AllocNode:Sid=login1:4242 ReqNodeList=(null) ExcNodeList=(null) NodeList={nodes} NumNodes=2-2 "
    "NumCPUs=2 NumTasks=2 CPUs/Task=1 ReqB:S:C:T=0:0:*:* TRES=cpu=2,mem=2000M,node=2,billing=2 Socks/Node=* "
    "NtasksPerN:B:S:C=1:0:*:* CoreSpec=* MinCPUsNode=1 MinMemoryCPU=1000M MinTmpDiskNode=0 Features=(null) "
    "DelayBoot=00:00:00 OverSubscribe=OK Contiguous=0 Licenses=(null) Network=(null) Command=/runs/x/slurm.sh "
    "WorkDir=/work StdErr=/runs/x/slurm-{job}.out StdIn=/dev/null StdOut=/runs/x/slurm-{job}.out Power=\n")


class FakeScontrol:
    """`scontrol` on the PATH that prints the line ``say`` last wrote (Slurm's state of the job)."""

    def __init__(self, tmp_path: Path, monkeypatch, job: str):
        self.job, self.line = job, tmp_path / "scontrol.line"
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir()
        script = bin_dir / "scontrol"
        script.write_text(f"#!/bin/sh\ncat '{self.line}'\n")
        script.chmod(0o755)
        monkeypatch.setenv("PATH", f"{bin_dir}:{__import__('os').environ['PATH']}")

    def say(self, state: str, reason: str = "None", start: str = "Unknown", nodes: str = "(null)") -> None:
        self.line.write_text(SCONTROL_LINE.format(job=self.job, state=state, reason=reason, start=start, nodes=nodes))


@pytest.fixture(autouse=True)
def _utc(monkeypatch):
    monkeypatch.setenv("TZ", "UTC")  # Slurm's times are the controller's local time
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def slurm_run(root: Path, name: str, job: str, steps: int = 0, nodes: list[str] | None = None, **kw) -> Path:
    """A Slurm run's directory: launch.json as submit writes it (the login node's), with node 0's
    fields once a life started (``nodes``); ``steps``: a run_start and step events of two ranks."""
    run = write_run(root, name, steps=steps, **{"max_steps": 40} | kw)
    if not steps:
        (run / "events.jsonl").write_text("")
    launch = {"scheduler": {"kind": "slurm", "job_id": job, "cluster": "ftuitest", "submit_host": "login1",
                            "submitted": T0, "script": "slurm.sh"},
              "host": "login1", "start_time": T0, "command": ["sbatch", "--parsable", str(run / "slurm.sh")],
              "command_line": f"sbatch --parsable {run / 'slurm.sh'}"}
    if nodes:
        launch |= {"host": nodes[0], "nodes": nodes, "pid": 4242, "create_time": T0 + 5, "pgid": 4242, "restarts": 0}
    (run / "launch.json").write_text(json.dumps(launch))
    return run


def no_nvml():
    raise AssertionError("a Slurm run's devices panel sampled NVML on this machine")


def offered(screen) -> dict[str, bool]:
    """The footer's actions and whether each is enabled."""
    return {b.binding.action: b.enabled for b in screen.active_bindings.values()}


async def test_the_form_shows_slurms_fields_for_launcher_slurm_and_start_submits_through_ops(tmp_path, monkeypatch):
    """The launcher select: local hides Slurm's fields; slurm shows them and hides the GPUs
    and the rendezvous (the nodes meet by themselves); Start goes through ftui.ops.start with
    the Slurm config (the submit itself is faked) and opens the queued run's dashboard."""
    import ftui.ops.start as ops_start

    fake = FakeScontrol(tmp_path, monkeypatch, "4101")
    fake.say("PENDING", "Priority")
    run = slurm_run(tmp_path / "runs", "submitted", "4101")
    started = []

    def start(cfg, *args, **kwargs):
        started.append(cfg)
        return ops_start.Started(run, cfg, {})

    monkeypatch.setattr(ops_start, "start", start)
    app = make_app(tmp_path, sampler=no_nvml)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await open_form(pilot, app)
        slurm_rows = ["slurm_partition", "slurm_account", "slurm_qos", "slurm_time", "slurm_gpus_per_node", "slurm_cpus_per_task",
                      "slurm_mem_per_task", "slurm_constraint", "slurm_sbatch_lines", "slurm_warn_s", "slurm_requeue"]
        assert screen.query_one("#f-launcher", Select).value == "local"
        assert screen.query_one("#row-gpus").display and not any(screen.query_one(f"#row-{k}").display for k in slurm_rows)
        screen.query_one("#f-nnodes", Input).value = "2"
        await until(pilot, lambda: screen.query_one("#row-rdzv_endpoint").display)
        screen.query_one("#f-nnodes", Input).value = "1"
        screen.query_one("#f-launcher", Select).value = "slurm"
        await until(pilot, lambda: all(screen.query_one(f"#row-{k}").display for k in slurm_rows))
        assert not screen.query_one("#row-gpus").display and not screen.query_one("#row-rdzv_endpoint").display
        assert "sbatch" in str(screen.query_one("#row-launcher").tooltip)  # RunConfig's description
        assert "--partition" in str(screen.query_one("#row-slurm_partition").tooltip)
        assert screen.query_one("#f-slurm_warn_s", Input).value == "120" and screen.query_one("#f-slurm_requeue", Switch).value
        for key, value in {"slurm_partition": "debug", "slurm_time": "4:00:00", "slurm_mem_per_task": "64G",
                           "slurm_sbatch_lines": "--exclusive; --mail-type=END", "gpus": "0"}.items():
            screen.query_one(f"#f-{key}", Input).value = value
        screen.query_one("#f-slurm_requeue", Switch).value = False
        await until(pilot, lambda: screen.current_config_dict().get("slurm_partition") == "debug")
        data = screen.current_config_dict()
        assert "gpus" not in data and "rdzv_endpoint" not in data  # hidden: left out of the config
        await pilot.press("f6")  # what Start does: a batch script submitted, not a command run here
        await until(pilot, lambda: app.screen.__class__.__name__ == "ShowText")
        shown = text_of(app.screen.query_one(".code")).replace("\n", "")
        assert "sbatch --parsable" in shown and "slurm.sh" in shown and "--slurm --dry-run" in shown
        await pilot.press("escape")
        await until(pilot, lambda: app.screen is screen)
        await pilot.press("f5")
        await until(pilot, lambda: isinstance(app.screen, DashboardScreen))
        cfg = started[0]
        assert (cfg.launcher, cfg.slurm_partition, cfg.slurm_time, cfg.slurm_mem_per_task) == ("slurm", "debug", "4:00:00", "64G")
        assert cfg.slurm_sbatch_lines == ["--exclusive", "--mail-type=END"] and cfg.slurm_requeue is False and cfg.slurm_warn_s == 120
        dash = app.screen
        await until(pilot, lambda: dash.view is not None and dash.view.status == "queued")
        assert "Slurm job 4101: Priority" in text_of(dash.query_one("#run-header"))


async def test_a_submission_slurm_refuses_is_said_and_the_form_stays(tmp_path, monkeypatch):
    """ops.errors.SlurmRefused (sbatch said no): its message, as other start errors; the form
    stays, with Start enabled again."""
    import ftui.ops.start as ops_start
    from ftui.ops.errors import SlurmRefused

    message = "sbatch refused the job: invalid partition specified: nosuch; name one `sinfo` lists"

    def start(cfg, *args, **kwargs):
        raise SlurmRefused(message)

    monkeypatch.setattr(ops_start, "start", start)
    app = make_app(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await open_form(pilot, app)
        screen.query_one("#f-launcher", Select).value = "slurm"
        await until(pilot, lambda: screen.query_one("#row-slurm_partition").display)
        screen.query_one("#f-slurm_partition", Input).value = "nosuch"
        await pilot.pause(0.5)
        await pilot.press("f5")
        await until(pilot, lambda: any(message in str(n.message) for n in app._notifications))
        assert isinstance(app.screen, LaunchScreen)
        await until(pilot, lambda: not screen.query_one("#start", Button).disabled)


async def test_the_dashboard_follows_a_slurm_run_from_queued_to_running_on_its_nodes(tmp_path, monkeypatch):
    """Queued: the header says so with squeue's reason and the estimated start and the job; the
    devices panel says no nodes yet; keys that need trained weights are disabled; NVML is never
    sampled. Running: the GPUs' nodes and each rank's memory from the step events, by node."""
    import ftui.ops.control as control

    stops = []
    monkeypatch.setattr(control, "stop", lambda run_dir, force=False: stops.append((run_dir, force)) or "scancel 4102: cancelled")
    fake = FakeScontrol(tmp_path, monkeypatch, "4102")
    fake.say("PENDING", "Resources", start="2023-11-14T23:00:00")
    run = slurm_run(tmp_path / "runs", "queued", "4102")
    app = make_app(tmp_path, attach=run, clock=lambda: T0 + 100, sampler=no_nvml)
    async with app.run_test(size=(120, 40)) as pilot:
        dash = app.screen
        await until(pilot, lambda: dash.view is not None and dash.view.status == "queued")
        await pilot.pause(0.3)
        header = text_of(dash.query_one("#run-header"))
        assert "queued" in header and "Slurm job 4102: Resources, start ~11-14 23:00" in header and "ETA" not in header
        assert "queued: no nodes yet (Slurm job 4102)" in text_of(dash.query_one("#gpu-panel"))
        keys = offered(dash)
        assert keys["stop"] and keys["chat"] is False and "resume" not in keys
        assert not dash.view.ended  # never died: its processes are not on this machine
        await pilot.press("s")  # Stop goes through ftui.ops.control (its Slurm branch: scancel a job that never started)
        await until(pilot, lambda: app.screen.__class__.__name__ == "Confirm")
        assert "Cancel the queued Slurm job 4102?" in text_of(app.screen.query(Label).first())
        await pilot.press("enter")
        await until(pilot, lambda: stops == [(run, False)])
        await until(pilot, lambda: any("scancel 4102" in str(n.message) for n in app._notifications))

        fake.say("RUNNING", start="2023-11-14T22:14:00", nodes="n[1-2]")
        launch = json.loads((run / "launch.json").read_text())
        (run / "launch.json").write_text(json.dumps(launch | {"host": "n1", "nodes": ["n1", "n2"], "pid": 4242,
                                                                  "create_time": T0 + 5, "start_time": T0 + 5}))
        with open(run / "events.jsonl", "a") as fh:
            fh.write(json.dumps(make_event("run_start", t=T0 + 20, run_id="queued", engine="ddp", precision="bf16", method="lora",
                                           world_size=2, nodes=2, model="Qwen/Qwen2.5-0.5B", max_steps=40, total_params=494_032_768,
                                           trainable_params=4_399_104, planned_tokens_per_step=65536)) + "\n")
            for step in (1, 2):
                mem = [{"rank": r, "allocated": (9 + r) << 30, "reserved": 12 << 30, "peak": (13 + r + step) << 30} for r in range(2)]
                fh.write(json.dumps(make_event(
                    "step", t=T0 + 20 + step, step=step, epoch=0.1, loss=2.0, lr=1e-4, grad_norm=1.0, tokens=100, trainable_tokens=50,
                    tokens_per_s=100.0, step_time_s=1.0, mfu=None, loss_scale=None, mem=mem)) + "\n")
        await until(pilot, lambda: dash.view.status == "running" and dash.view.step == 2)
        await until(pilot, lambda: "n2" in text_of(dash.query_one("#gpu-panel")))
        gpu = text_of(dash.query_one("#gpu-panel"))
        assert "GPUs on n1, n2 (Slurm job 4102)" in gpu
        rows = {line.split()[1]: line.split() for line in gpu.splitlines() if line.strip().startswith(("n1", "n2"))}
        assert rows["r0"] == ["n1", "r0", "9.0/12.0G", "15.0G"] and rows["r1"] == ["n2", "r1", "10.0/12.0G", "16.0G"]
        header = text_of(dash.query_one("#run-header"))
        assert "running" in header and "Slurm job 4102" in header and "Resources" not in header
        assert offered(dash)["chat"] is True


async def test_slurms_text_is_shown_literally(tmp_path, monkeypatch):
    """A Reason from Slurm is untrusted text: one with markup and an escape sequence never reaches the screen."""
    fake = FakeScontrol(tmp_path, monkeypatch, "4103")
    fake.say("PENDING", "[red]Boom\x1b[2J[/red]")
    run = slurm_run(tmp_path / "runs", "hostile", "4103")
    app = make_app(tmp_path, attach=run, clock=lambda: T0 + 100, sampler=no_nvml)
    async with app.run_test(size=(160, 40)) as pilot:
        dash = app.screen
        await until(pilot, lambda: dash.view is not None and dash.view.status == "queued")
        await pilot.pause(0.3)
        header = text_of(dash.query_one("#run-header"))
        # The reader keeps a Reason only when it is one word of Slurm's kind (slurm_state._word): this one is
        # dropped, never rendered as markup or sent to the terminal raw
        assert "\x1b" not in header and "Boom" not in header and "queued" in header


async def test_a_cancelled_run_shows_its_reason_and_hint_as_a_failure(tmp_path):
    """Slurm ended the job (a time limit, a preemption, scancel): the banner says why and what
    to do, in red as a failed run's."""

    class Banner(App):
        def compose(self):
            yield EndBanner()

    view = RunView(run_id="r", status="cancelled", reason="Slurm ended job 12: its time limit was reached",
                   hint="resume it (ftui train --resume r) with a longer slurm_time")
    app = Banner()
    async with app.run_test() as pilot:
        banner = app.query_one(EndBanner)
        banner.show(view)
        await pilot.pause()
        shown = text_of(banner)
        assert "CANCELLED: Slurm ended job 12: its time limit was reached" in shown and "hint: resume it" in shown
        assert banner.has_class("-failed")
    assert "cancelled" in DashboardScreen.RESUMABLE


async def test_the_runs_screen_shows_a_queued_runs_reason_start_and_job(tmp_path, monkeypatch):
    fake = FakeScontrol(tmp_path, monkeypatch, "4104")
    fake.say("PENDING", "BeginTime", start="2023-11-14T23:30:00")
    slurm_run(tmp_path / "runs", "waiting", "4104")
    app = make_app(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        table = await open_runs(pilot, app, 1)
        assert str(table.get_cell("waiting", "status")) == "queued"
        detail = text_of(app.screen.query_one("#run-detail"))
        assert "queued  Slurm job 4104: BeginTime, start ~11-14 23:30" in detail


def test_dashboard_of_a_running_slurm_run(snap_compare, tmp_path, monkeypatch):
    """The layout of a Slurm run's dashboard at 80x24: its job in the header, the devices panel
    naming the nodes with each rank's memory (no NVML figures of this machine)."""
    from ftui.tui.app import FtuiApp

    monkeypatch.chdir(tmp_path)
    FakeScontrol(tmp_path, monkeypatch, "4105").say("RUNNING", start="2023-11-14T22:13:25", nodes="n[1-2]")
    run = slurm_run(tmp_path / "runs", "qwen-lora-20231114-221320", "4105", steps=240, max_steps=600, nodes=["n1", "n2"],
                    log_lines=("[rank0] step 240 done", "[rank1] step 240 done"))
    app = FtuiApp(tmp_path / "runs", attach=run, clock=lambda: T0 + 400, sampler=no_nvml, offer_live=False)

    async def settle(pilot):
        await pilot.pause(1.0)
        await pilot.wait_for_scheduled_animations()

    assert snap_compare(app, terminal_size=(80, 24), run_before=settle)


def test_a_yamls_sbatch_lines_fill_one_field_and_come_back_as_the_list():
    """slurm_sbatch_lines is a list in the YAML and one line in the form (an Input): joined with
    "; ", split again on ";" (or a newline); Slurm's keys stay out of a local run's config."""
    from ftui.tui.screens.launch_fields import FORM_DEFAULTS, config_to_form, form_to_config

    cfg = FORM_DEFAULTS | {"launcher": "slurm", "slurm_sbatch_lines": ["--exclusive", "--mail-type=END"], "slurm_partition": "gpu"}
    values = config_to_form(cfg) | {"method": "lora", "precision": "fp32"}
    assert values["slurm_sbatch_lines"] == "--exclusive; --mail-type=END"
    data = form_to_config(values)
    assert data["slurm_sbatch_lines"] == ["--exclusive", "--mail-type=END"] and data["slurm_partition"] == "gpu"
    assert "gpus" not in data and "rdzv_endpoint" not in data
    assert form_to_config(values | {"slurm_sbatch_lines": " --exclusive ;\n--comment=x; "})["slurm_sbatch_lines"] == ["--exclusive", "--comment=x"]
    local = form_to_config(values | {"launcher": "local"})
    assert not any(k.startswith("slurm_") for k in local) and local["launcher"] == "local"
