"""SVG snapshots of the layout at 80x24 (the smallest size ftui supports) and larger.

Recorded runs with fixed clocks and a fixed GPU sample keep them deterministic. After a
deliberate layout change: pytest tests/test_tui_snapshots.py --snapshot-update, then look
at the new SVGs before committing them."""

import pytest

from ftui.tui.app import FtuiApp
from tests.fixtures_runs import T0, dpo_figures, fixed_sampler, write_run


@pytest.fixture(autouse=True)
def _env(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TZ", "UTC")
    __import__("time").tzset()


async def settle(pilot):
    await pilot.pause(1.0)
    await pilot.wait_for_scheduled_animations()


def test_launch_screen_with_demo(snap_compare, tmp_path):
    app = FtuiApp("runs", sampler=fixed_sampler, offer_live=False)

    async def before(pilot):
        while not pilot.app.screen._ready:
            await pilot.pause(0.1)
        await pilot.press("f2")
        verdict = pilot.app.screen.query_one("#plan-verdict")
        for _ in range(100):  # the planner's verdict comes from a worker
            if "fits" in str(verdict.render()):
                break
            await pilot.pause(0.1)
        preview = pilot.app.screen.query_one("#preview")
        for _ in range(2400):  # the first example, rendered by a child process (ftui data)
            if "with loss" in str(preview.render()):
                break
            await pilot.pause(0.1)
        pilot.app.screen.set_focus(None)  # a blinking cursor would make the picture flaky
        pilot.app.clear_notifications()  # "demo preset loaded" would cover the launch bar (as the Chinese form's test does)
        await settle(pilot)

    assert snap_compare(app, terminal_size=(80, 24), run_before=before)


@pytest.mark.parametrize("size", [(80, 24), (120, 36)], ids=["80x24", "120x36"])
def test_dashboard_mid_run(snap_compare, tmp_path, size):
    run = write_run(tmp_path / "runs", "qwen-lora-20231114-221320", steps=240, max_steps=600,
                    log_lines=("[rank0] step 240 done", "[rank1] step 240 done"))
    app = FtuiApp(tmp_path / "runs", attach=run, clock=lambda: T0 + 400, sampler=fixed_sampler, offer_live=False)
    assert snap_compare(app, terminal_size=size, run_before=settle)


@pytest.mark.parametrize("size", [(80, 24), (120, 36)], ids=["80x24", "120x36"])
def test_dashboard_dpo_run_plots_margin_and_accuracy(snap_compare, tmp_path, size):
    """A preference run: its rewards_margin beside the loss at 80x24, rewards_accuracy below
    it on a taller terminal (issue 15)."""
    run = write_run(tmp_path / "runs", "qwen-dpo-20231114-221320", steps=240, max_steps=600, step_extras=dpo_figures,
                    eval_extras=lambda s: dpo_figures(s + 20, "eval_"))
    app = FtuiApp(tmp_path / "runs", attach=run, clock=lambda: T0 + 400, sampler=fixed_sampler, offer_live=False)
    assert snap_compare(app, terminal_size=size, run_before=settle)


def test_dashboard_failed_run(snap_compare, tmp_path):
    run = write_run(tmp_path / "runs", "qwen-lora-20231114-221320", steps=80, max_steps=600, end="failed",
                    log_lines=("Traceback (most recent call last):", "torch.OutOfMemoryError: CUDA out of memory."))
    app = FtuiApp(tmp_path / "runs", attach=run, clock=lambda: T0 + 400, sampler=fixed_sampler, offer_live=False)
    assert snap_compare(app, terminal_size=(100, 30), run_before=settle)


def test_runs_screen(snap_compare, tmp_path):
    root = __import__("pathlib").Path("runs")  # relative: the title shows it as given
    write_run(root, "qwen-lora-20231114-221320", steps=600, max_steps=600, end="completed")
    write_run(root, "llama-full-20231114-231000", steps=80, max_steps=600, end="failed", model="meta-llama/Llama-3.2-1B")
    write_run(root, "demo-20231115-090000", steps=30, max_steps=390, end="stopped", model="ftui-demo")
    app = FtuiApp(root, sampler=fixed_sampler, offer_live=False, render_examples=False)  # the form under it renders no example (a child process)

    async def before(pilot):
        pilot.app.action_show_runs()
        await settle(pilot)
        await pilot.press("space", "down", "space", "o")
        await settle(pilot)

    assert snap_compare(app, terminal_size=(100, 30), run_before=before)
