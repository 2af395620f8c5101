"""``ftui`` (the app) and ``ftui attach RUN`` (the app on one run's dashboard)."""

from __future__ import annotations

import argparse
from pathlib import Path

import yaml

from ftui.cli.console import EXIT_OK, EXIT_USAGE, error_line, safe_console, warning_line
from ftui.cli.runs import resolve_run_arg
from ftui.rundir.paths import default_runs_root
from ftui.safety.bounded_input import load_yaml


def cmd_app(args: argparse.Namespace) -> int:
    from ftui.tui.app import FtuiApp

    initial = None
    if args.app_config:
        from ftui.config.problems import ConfigError  # pydantic's model: only for --config
        from ftui.config.load import load_config

        try:
            load_config(args.app_config)
        except ConfigError as e:
            if any(p.field == "config" for p in e.problems):  # not a YAML mapping ftui reads: nothing to fill the form with
                safe_console(stderr=True).print(error_line(str(e)))
                return EXIT_USAGE
            safe_console(stderr=True).print(warning_line(str(e)))  # open the form anyway, filled with what could be read
        try:  # the file's own keys, not every field: the form keeps exactly what it set (lora_target: all)
            initial = load_yaml(Path(args.app_config).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            initial = None
        if not isinstance(initial, dict):
            initial = None
    FtuiApp(args.app_root or default_runs_root(), initial_config=initial).run()
    return EXIT_OK


def open_rollouts_app(run_dir: Path, root: str | None, query: str = "", sort: str = "newest") -> int:
    """``ftui rollouts RUN``: the app on the run's rollout browser (Escape: its dashboard)."""
    from ftui.tui.app import FtuiApp

    FtuiApp(root or default_runs_root(), attach=run_dir, offer_live=False, rollouts={"query": query, "sort": sort}).run()
    return EXIT_OK


def cmd_attach(args: argparse.Namespace) -> int:
    from ftui.tui.app import FtuiApp

    run_dir = resolve_run_arg(args.run, args.root, safe_console(stderr=True))
    if run_dir is None:
        return EXIT_USAGE
    FtuiApp(args.root or default_runs_root(), attach=run_dir, offer_live=False).run()
    return EXIT_OK

