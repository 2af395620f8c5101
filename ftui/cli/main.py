"""The ``ftui`` command line. No torch is imported here: training runs in child processes.

    ftui                                     the app: launch form, dashboards, runs
    ftui train CONFIG.yaml | --preset demo   start a run (and follow it, or --detach)
    ftui train --resume RUN [--checkpoint N] continue a stopped or failed run from a checkpoint
    ftui presets                             the engine presets and when to use each
    ftui plan CONFIG.yaml                    will it fit? per-GPU memory estimate and what would fit
    ftui data CONFIG.yaml --show N | --dump OUT.jsonl   the training examples as the run encodes them
    ftui chat --run RUN | --model PATH       talk to a trained model (streaming REPL, or --prompt)
    ftui predict RUN --dataset NAMES         generate answers to a dataset's prompts, BLEU-4 / ROUGE (a job)
    ftui eval RUN --dataset NAMES            eval loss and perplexity (reward accuracy) over datasets (a job)
    ftui serve RUN [--port N]                an OpenAI-compatible API over a run's model (a job, until stopped)
    ftui stop RUN|RUN/serve/ID               stop a detached run or job (the app's Stop)
    ftui attach RUN                          the dashboard of a run, live or finished
    ftui watch RUN                           plain progress lines (no TTY needed)
    ftui rollouts RUN [--print | --json]     a grpo or ppo run's completions and rewards (the browser, or lines)
    ftui runs                                list the runs under the runs root
    ftui delete RUN [--yes]                  delete a run that no job runs (asks first)

Every command that reads or writes runs takes --root RUNS_ROOT (train: --runs-root too, its old name).
"""

from __future__ import annotations

import argparse
import os
import sys

from ftui.cli.console import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_USAGE, error_line, safe_console
from ftui.cli.data import cmd_data
from ftui.cli.following import follow_job as _follow_job
from ftui.cli.parser import build_parser
from ftui.cli.plan import cmd_plan
from ftui.cli.presets import cmd_presets
from ftui.cli.train import cmd_train
from ftui.i18n import _

# Each command is a module of its own under ftui/cli/ (train, jobs, chat, runs, app, plan,
# data, presets, export); this one reads the arguments and dispatches. The names above are
# looked up here at each call, so a test that replaces one (a console, a follower, a command)
# in this module reaches the command it runs.


def main(argv: list[str] | None = None) -> int:
    try:
        return _dispatch(build_parser().parse_args(argv))
    except BrokenPipeError:  # `ftui runs | head`: the reader left; nothing more to say
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # Python's flush at exit must not raise it again
        return EXIT_FAILED
    except KeyboardInterrupt:  # Ctrl-C where a command has nothing to stop (chat, data, plan): no traceback
        print("\n" + _("interrupted"), file=sys.stderr)
        return EXIT_INTERRUPTED


def _dispatch(args: argparse.Namespace) -> int:
    if args.command is not None and not _apply_app_options(args):
        return EXIT_USAGE
    if args.command == "train":
        return cmd_train(args, follow=_follow_job)
    if args.command == "runs":
        from ftui.cli.runs import cmd_runs

        return cmd_runs(args, console_of=safe_console)
    if args.command == "presets":
        return cmd_presets(args)
    if args.command == "plan":
        return cmd_plan(args)
    if args.command == "data":
        return cmd_data(args)
    if args.command == "chat":
        from ftui.cli.chat import cmd_chat

        return cmd_chat(args)
    if args.command in ("predict", "eval"):
        from ftui.cli.jobs import cmd_offline_job

        return cmd_offline_job(args, follow=_follow_job)
    if args.command == "export":
        from ftui.cli.export import cmd_export

        return cmd_export(args)
    if args.command == "serve":
        from ftui.cli.serve import cmd_serve

        return cmd_serve(args)
    if args.command == "stop":
        from ftui.cli.stop import cmd_stop

        return cmd_stop(args)
    if args.command == "attach":
        from ftui.cli.app import cmd_attach

        return cmd_attach(args)
    if args.command == "watch":
        from ftui.cli.runs import cmd_watch

        return cmd_watch(args)
    if args.command == "rollouts":
        from ftui.cli.rollouts import cmd_rollouts

        return cmd_rollouts(args)
    if args.command == "delete":
        from ftui.cli.runs import cmd_delete

        return cmd_delete(args)
    from ftui.cli.app import cmd_app

    return cmd_app(args)


def _apply_app_options(args: argparse.Namespace) -> bool:
    """``ftui --root R COMMAND``: the runs root goes to the command (its own --root wins), so
    that ``ftui --root R delete RUN`` never acts on the default root; ``--config`` belongs to the
    app alone. False (after saying why) when the command cannot take them."""
    err = safe_console(stderr=True)
    if args.app_config:
        err.print(error_line(_("--config opens the launch form; with a command, give the YAML to the command "
                               "(ftui train CONFIG.yaml)")))
        return False
    if args.app_root:
        for name in ("root", "runs_root"):
            if hasattr(args, name):
                if getattr(args, name) is None:
                    setattr(args, name, args.app_root)
                return True
        err.print(error_line(_("ftui {command} takes no runs root; leave out --root").format(command=args.command)))
        return False
    return True


if __name__ == "__main__":
    sys.exit(main())
