"""``ftui presets [NAME]``: the engine presets and when to use each."""

from __future__ import annotations

import argparse
import sys

from rich.markup import escape

from ftui.cli.console import EXIT_OK, EXIT_USAGE, error_line, safe_console
from ftui.i18n import _


def cmd_presets(args: argparse.Namespace) -> int:
    from ftui.presets.engine_presets import PRESET_NAMES, describe, preset_path

    out = safe_console()
    if args.name:
        if args.name not in PRESET_NAMES:
            safe_console(stderr=True).print(error_line(_("no preset {name}; presets: {names}").format(
                name=repr(args.name), names=", ".join(PRESET_NAMES))))
            return EXIT_USAGE
        sys.stdout.write(preset_path(args.name).read_text(encoding="utf-8"))
        return EXIT_OK
    width = max(map(len, PRESET_NAMES))
    for name in PRESET_NAMES:
        what, when = describe(name)
        if out.is_terminal:
            when_line = escape(_("when: {when}").format(when=when))
            out.print(f"[bold]{name:<{width}}[/]  {escape(what)}\n{'':<{width}}  [dim]{when_line}[/]")
        else:
            print(f"{name:<{width}}  " + _("{what}. When: {when}").format(what=what, when=when))
    if out.is_terminal:
        files = escape(_("files: {path}  (ftui presets NAME prints one; a copied DeepSpeed file is used with deepspeed: PATH)").format(
            path=preset_path("single").parent))
        out.print(f"\n[dim]{files}[/]")
    return EXIT_OK

