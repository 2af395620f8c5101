"""The rollout browser (issue 43) driven by Textual's pilot on grpo run directories written by
hand (tests/rollout_runs.py): opening it from the dashboard (key g, offered only for a run with
rollouts), the runs screen and the app's ``rollouts`` start; sorting by reward, searching,
a step filter, a completion shown whole with its reference and rewards, hostile text shown
literally and bounded, a live run's new rollouts coming in; the dashboard's grpo figures and
the runs overlay comparing ``reward``; an SVG snapshot."""

from __future__ import annotations

import pytest
from textual.widgets import DataTable, Input

from ftui.rundir.rollouts import RolloutWriter
from ftui.tui.screens.dashboard import DashboardScreen
from ftui.tui.screens.rollouts import DETAIL_CAP, RolloutsScreen
from ftui.tui.screens.runs import RunsScreen
from tests.fixtures_runs import T0, write_run
from tests.rollout_runs import HOSTILE_MARKUP, LONG_COMPLETION, ROWS, rollout, write_grpo_run
from tests.test_tui_pilot import make_app, open_runs, text_of, until


@pytest.fixture(autouse=True)
def _cwd(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


def completions(screen: RolloutsScreen) -> list[str]:
    return [item.row["completion"] for item in screen.visible_items]


def detail(screen: RolloutsScreen) -> str:
    return text_of(screen.query_one("#ex-detail-text"))


async def open_browser(pilot, app, run, **kw) -> RolloutsScreen:
    app.push_screen(RolloutsScreen(run, **kw))
    screen = app.screen
    await until(pilot, lambda: len(screen.items) == len(ROWS))
    return screen


async def test_sorts_by_reward_searches_filters_steps_and_shows_a_completion_whole(tmp_path):
    run = write_grpo_run(tmp_path / "runs")
    app = make_app(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await open_browser(pilot, app, run)
        assert [i.row["step"] for i in screen.visible_items] == [3, 3, 2, 2, 1, 1]  # newest step first
        table = screen.query_one("#ex-table", DataTable)
        assert table.row_count == len(ROWS)
        await pilot.press("s")  # by step
        assert [i.row["step"] for i in screen.visible_items] == [1, 1, 2, 2, 3, 3]
        await pilot.press("s")  # reward, highest first; the row without a reward last
        rewards = [i.row["reward"] for i in screen.visible_items]
        assert rewards[:2] == [1.5, 1.5] and rewards[-1] is None and rewards[:-1] == sorted(rewards[:-1], reverse=True)
        assert "reward, highest first" in text_of(screen.query_one("#ex-title"))
        await pilot.press("s")
        assert [i.row["reward"] for i in screen.visible_items][:3] == [0.5, 0.5, 0.5]
        await pilot.press("slash", *"answer is")
        await until(pilot, lambda: sorted(completions(screen)) == ["The answer is 0", "The answer is 1"])
        await pilot.press("enter")  # back to the table
        screen.query_one("#ex-search", Input).value = "step:1"
        await until(pilot, lambda: sorted(completions(screen)) == ["I think 7", "The answer is 0"])
        screen.query_one("#ex-search", Input).value = "step:1 think"
        await until(pilot, lambda: completions(screen) == ["I think 7"])
        shown = detail(screen)  # the highlighted rollout whole: figures, prompt, reference, completion
        assert "step 1 · generation 0 · group 0 · sample 1" in shown
        assert "reward 0.5000  accuracy 0.0000  format 0.5000" in shown and "advantage -0.5000" in shown
        assert "prompt\nWhat is 0 + 1?" in shown and "reference\n1" in shown and "completion\nI think 7" in shown


async def test_hostile_text_is_shown_literally_and_a_long_completion_bounded(tmp_path):
    run = write_grpo_run(tmp_path / "runs")
    app = make_app(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await open_browser(pilot, app, run, sort="step")
        table = screen.query_one("#ex-table", DataTable)
        await pilot.press("down", "down")  # step 2's markup
        assert HOSTILE_MARKUP in detail(screen)  # as typed: never markup
        assert any(HOSTILE_MARKUP[:20] in cell.plain for cell in table.get_row_at(2))
        await pilot.press("down")  # escape sequences: visible, never sent to the terminal
        shown = detail(screen)
        assert "\\x1b[31mred\\x1b[0m \\x1b]52;c;ZXZpbA==\\x07 \\r\\u202e" in shown and "\x1b" not in shown
        assert "reward -" in shown and "accuracy -" in shown  # a function that returned None
        assert not any("\x1b" in cell.plain or "\r" in cell.plain for cell in table.get_row_at(3))
        await pilot.press("down")  # the 100 KB completion: its start, and a note saying how much is left out
        shown = detail(screen)
        assert "cut at max_completion_length" in shown and "THE-END" not in shown
        assert f"{len(LONG_COMPLETION) - DETAIL_CAP:,} more characters not shown" in shown
        assert shown.count("9") < DETAIL_CAP + 100
        await pilot.pause(0.3)  # and the screen still draws and answers
        await pilot.press("up")
        assert "escape" in detail(screen)


async def test_a_live_runs_new_rollouts_come_in_and_the_highlight_stays(tmp_path):
    run = write_grpo_run(tmp_path / "runs")
    app = make_app(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await open_browser(pilot, app, run, sort="step")
        await pilot.press("down")
        assert screen.visible_items[1].row["completion"] == "I think 7"
        with RolloutWriter(run) as writer:
            writer.write([rollout(4, 0, 0, "a new one", 1.0), rollout(4, 0, 1, "another", 0.0)])
        await until(pilot, lambda: len(screen.items) == len(ROWS) + 2)
        assert completions(screen)[-2:] == ["a new one", "another"]
        table = screen.query_one("#ex-table", DataTable)
        assert screen.visible_items[table.cursor_row].row["completion"] == "I think 7"
        with open(run / "rollouts.jsonl", "a") as fh:
            fh.write('{"step": "hostile"}\n')
        with RolloutWriter(run) as writer:
            writer.write([rollout(5, 0, 0, "fifth", 1.0)])
        await until(pilot, lambda: len(screen.items) == len(ROWS) + 3)
        assert "1 lines skipped (not rollouts)" in text_of(screen.query_one("#ex-title"))
        with RolloutWriter(run) as writer:  # a resumed run writes a rollout again: it replaces the one before
            writer.write([rollout(4, 0, 0, "a new one, again", 1.0), rollout(6, 0, 0, "sixth", 1.0)])
        await until(pilot, lambda: len(screen.items) == len(ROWS) + 4)
        assert "a new one, again" in completions(screen) and "a new one" not in completions(screen)


async def test_a_run_without_rollouts_says_so(tmp_path):
    run = write_run(tmp_path / "runs", "sft-1", steps=3, max_steps=3, end="completed")
    app = make_app(tmp_path)
    async with app.run_test(size=(100, 30)) as pilot:
        app.push_screen(RolloutsScreen(run))
        screen = app.screen
        await until(pilot, lambda: "no rollouts yet" in screen.status.plain)
        assert screen.items == []


async def test_the_dashboard_offers_g_for_a_grpo_run_only_and_opens_the_browser(tmp_path):
    grpo = write_grpo_run(tmp_path / "runs")
    sft = write_run(tmp_path / "runs", "sft-1", steps=3, max_steps=3, end="completed")
    app = make_app(tmp_path, attach=sft)
    async with app.run_test(size=(120, 40)) as pilot:
        dashboard = app.screen
        await until(pilot, lambda: isinstance(dashboard, DashboardScreen) and dashboard.view is not None)
        await pilot.pause(0.3)
        assert not dashboard.rollouts_offered and not dashboard.check_action("rollouts", ())
        assert "Rollouts" not in [c.title for c in app.get_system_commands(dashboard)]
        await pilot.press("g")
        assert app.screen is dashboard  # an sft run has none: nothing opens
    app = make_app(tmp_path, attach=grpo)
    async with app.run_test(size=(120, 40)) as pilot:
        dashboard = app.screen
        await until(pilot, lambda: isinstance(dashboard, DashboardScreen) and dashboard.rollouts_offered)
        assert "Rollouts" in [c.title for c in app.get_system_commands(dashboard)]
        assert dashboard.active_bindings["g"].enabled and dashboard.active_bindings["g"].binding.show  # in the footer
        await pilot.press("g")
        await until(pilot, lambda: isinstance(app.screen, RolloutsScreen))
        assert app.screen.run_dir == grpo
        await pilot.press("escape")
        await until(pilot, lambda: app.screen is dashboard)


async def test_the_runs_screen_and_the_app_start_open_the_browser(tmp_path):
    grpo = write_grpo_run(tmp_path / "runs")
    app = make_app(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await open_runs(pilot, app, 1)
        await pilot.press("g")
        await until(pilot, lambda: isinstance(app.screen, RolloutsScreen) and len(app.screen.items) == len(ROWS))
        assert app.screen.run_dir == grpo
        await pilot.press("escape")
        await until(pilot, lambda: isinstance(app.screen, RunsScreen))
    app = make_app(tmp_path, attach=grpo, rollouts={"query": "step:2", "sort": "reward"})  # ftui rollouts RUN --step 2 --sort reward
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: isinstance(app.screen, RolloutsScreen) and len(app.screen.items) == len(ROWS))
        screen = app.screen
        await until(pilot, lambda: [i.row["step"] for i in screen.visible_items] == [2, 2])
        assert screen.sort_metric == "reward" and screen.visible_items[-1].row["reward"] is None
        await pilot.press("escape")
        await until(pilot, lambda: isinstance(app.screen, DashboardScreen))


async def test_the_dashboard_shows_a_grpo_runs_figures_and_the_overlay_compares_reward(tmp_path):
    """Interface 5's figures are extra figures: the "now" panel lists all of them (16 fit the
    schema), f plots each; the runs overlay compares ``reward`` across runs."""
    root = tmp_path / "runs"
    a = write_grpo_run(root, "grpo-a-20231114-221320", steps=30, end="completed")
    write_run(root, "grpo-b-20231114-231000", steps=20, max_steps=30, end="stopped",
              step_extras=lambda s: {"reward": s / 20, "kl": 0.01})
    write_run(root, "sft-20231115-090000", steps=10, max_steps=30, end="completed")
    app = make_app(tmp_path, attach=a)
    async with app.run_test(size=(120, 50)) as pilot:
        dashboard = app.screen
        await until(pilot, lambda: dashboard.view is not None and dashboard.view.step == 30)
        names = dashboard.view.figure_names
        assert names[:2] == ["reward", "reward_std"] and {"completion_length", "kl", "entropy", "clip_ratio"} <= set(names)
        now = text_of(dashboard.query_one("#figures"))
        for name in names:
            assert name in now
        await open_runs(pilot, app, 3)
        runs = app.screen
        await pilot.press("space", "down", "space", "down", "space", "o")
        await until(pilot, lambda: len(runs.overlaid) == 3)
        assert "reward" in runs.overlay_metrics()
        while runs.overlay_metric != "reward":
            await pilot.press("f")
        plot = runs.query_one("#overlay")
        curves = dict(plot.curves)
        assert sorted(curves) == ["grpo-a-20231114-221320", "grpo-b-20231114-231000"]  # the sft run has no reward
        assert curves["grpo-b-20231114-231000"] == (list(range(1, 21)), [s / 20 for s in range(1, 21)])


def test_browser_snapshot(snap_compare, tmp_path):
    """The rollout browser at 100x30, sorted by reward (highest first), the hostile markup's
    rollout highlighted: the markup and the escapes shown as text."""
    run = write_grpo_run(tmp_path / "runs")
    app = make_app(tmp_path, clock=lambda: T0 + 400)

    async def before(pilot):
        pilot.app.push_screen(RolloutsScreen(run, follow=False))
        await until(pilot, lambda: len(pilot.app.screen.items) == len(ROWS))
        await pilot.press("s", "s", "down", "down", "down")
        await pilot.pause(0.5)
        await pilot.wait_for_scheduled_animations()

    assert snap_compare(app, terminal_size=(100, 30), run_before=before)


def test_dashboard_of_a_grpo_run_snapshot(snap_compare, tmp_path):
    """A grpo run's dashboard at 80x24: the reward plotted beside the loss, the reward figures
    in the "now" panel, g Rollouts in the footer (it gives way last)."""
    run = write_grpo_run(tmp_path / "runs", steps=90)
    app = make_app(tmp_path, attach=run, clock=lambda: T0 + 400)

    async def before(pilot):
        await until(pilot, lambda: pilot.app.screen.rollouts_offered)
        await pilot.pause(1.0)
        await pilot.wait_for_scheduled_animations()

    assert snap_compare(app, terminal_size=(80, 24), run_before=before)


def test_the_table_shows_a_rendered_prompts_end():
    from ftui.tui.screens.rollouts import prompt_cell

    prompt = ("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nWhat is 2+3?\x1b[2J<|im_end|>\n"
              "<|im_start|>assistant\n")
    cell = prompt_cell(prompt, 40).plain
    assert cell.startswith("…") and cell.endswith("⏎<|im_start|>assistant") and len(cell) == 40
    assert "\\x1b[2J" in prompt_cell(prompt, 60).plain and "\x1b" not in prompt_cell(prompt, 60).plain
