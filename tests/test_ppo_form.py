"""The launch form with stage ppo: choosing grpo or ppo gives temperature, top_p and top_k the
chosen stage's defaults (TRL's for grpo, LLaMA-Factory's for ppo) unless the user typed them."""

from textual.widgets import Input, Select

from ftui.tui.screens.launch import LaunchScreen
from tests.test_tui_pilot import make_app, until


async def test_choosing_grpo_or_ppo_gives_the_shared_sampling_keys_that_stages_defaults(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    app = make_app(tmp_path)
    async with app.run_test(size=(100, 40)) as pilot:
        screen = app.screen
        assert isinstance(screen, LaunchScreen)
        await until(pilot, lambda: screen._ready)
        sampling = lambda: tuple(screen.values()[k] for k in ("temperature", "top_p", "top_k"))  # noqa: E731
        screen.query_one("#f-stage", Select).value = "grpo"
        await until(pilot, lambda: sampling() == ("1.0", "1.0", "0"))
        screen.query_one("#f-stage", Select).value = "ppo"
        await until(pilot, lambda: sampling() == ("0.95", "0.7", "50"))
        screen.query_one("#f-temperature", Input).value = "0.6"
        screen.query_one("#f-stage", Select).value = "grpo"
        await until(pilot, lambda: sampling() == ("0.6", "1.0", "0"))  # typed: kept
        config = screen.current_config_dict()
        assert (config["stage"], config["temperature"], config["top_p"]) == ("grpo", "0.6", "1.0")
