"""``ftui data CONFIG``: a run's training examples as the runner encodes them, after the first
records' images (their sizes and the image tokens each expands to)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from rich.markup import escape

from ftui.cli.console import EXIT_FAILED, EXIT_OK, EXIT_USAGE, error_line, note_line, safe_console
from ftui.cli.train import load_train_config
from ftui.i18n import _


def cmd_data(args: argparse.Namespace) -> int:
    """The config's training examples, encoded by the runner in a child process."""
    from ftui.data.examples import example_text
    from ftui.jobs.examples import EncodedExamples, ExamplesFailed

    out, err = safe_console(), safe_console(stderr=True)
    if (args.show is None) == (args.dump is None):
        err.print(_("ftui data: give --show N (print N examples) or --dump OUT.jsonl (write all of them)"))
        return EXIT_USAGE
    if args.show is not None and args.show < 1:
        err.print(_("ftui data: --show takes a number of examples, 1 or more"))
        return EXIT_USAGE
    target = Path(args.dump).expanduser() if args.dump else None
    if target is not None and not target.parent.is_dir():
        err.print(error_line(_("{path} is not a directory; give --dump a file in an existing directory").format(path=target.parent)))
        return EXIT_USAGE
    if target is not None and (target.exists() or target.is_symlink()):
        if not target.is_file() or target.is_symlink():  # a device, a directory, /dev/stdout's link: never replaced
            err.print(error_line(_("{path} exists and is not a regular file; give --dump a new file's path").format(path=target)))
            return EXIT_USAGE
        if not args.force:
            err.print(error_line(_("{path} exists; give another path, or --force to replace it").format(path=target)))
            return EXIT_USAGE
    args.node_rank = args.runs_root = None
    cfg = load_train_config(args, err)
    if cfg is None:
        return EXIT_USAGE
    examples = EncodedExamples(cfg, limit=args.show, text=target is None)
    if target is None:
        show_images(out, cfg, args.show)
    count = 0
    try:
        if target is not None:
            from ftui.safety.files import replacing

            with replacing(target) as fh:  # a new, randomly named file beside OUT (no planted OUT.part is followed), then renamed
                for row in examples:
                    fh.write(json.dumps(row, ensure_ascii=False) + "\n")
                    count += 1
        else:
            for row in examples:
                count += 1
                out.print(example_text(count, row), soft_wrap=True)  # the text as it is: the terminal wraps it
    except ExamplesFailed as e:
        err.print(error_line(str(e)))
        return EXIT_USAGE if e.code == EXIT_USAGE else EXIT_FAILED
    except OSError as e:
        err.print(error_line(_("cannot write {path}: {reason}").format(path=target, reason=e)))
        return EXIT_FAILED
    for note in examples.notes:
        err.print(note_line(note))
    if target is not None:
        err.print(escape(_("wrote {count} examples to {path}").format(count=count, path=target)))
    return EXIT_OK


def show_images(out: Any, cfg: Any, limit: int) -> None:
    """The first records' images (ftui.jobs.examples.image_listings), before their examples."""
    from ftui.data.media_listing import listing_text
    from ftui.jobs.examples import image_listings
    from ftui.data.records import DataFormatError

    try:
        listings = image_listings(cfg, limit)
    except (DataFormatError, OSError, ValueError):
        return  # the examples' child names what is wrong with the datasets
    for listing in listings:
        out.print(listing_text(listing), soft_wrap=True, end="")
