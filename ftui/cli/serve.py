"""``ftui serve RUN``: an OpenAI-compatible API over a run's model, as a job (the server is
``ftui.runner.serve``; the checks and the job directory ``ftui.jobs.serve_job`` through
``ftui.ops.serve``). Without --detach the command follows the job: the URL once it listens,
then its counters; Ctrl-C stops following, never the server (``ftui stop`` does)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rich.markup import escape

from ftui.i18n import N_, _
from ftui.rundir.paths import default_runs_root

HELP = N_("serve a run's model as an OpenAI-compatible API (/v1/chat/completions, /v1/completions, /v1/models) until stopped")
EXAMPLES = N_("""examples:
  ftui serve demo-20261128-090000                      # http://127.0.0.1:8000/v1, this machine only
  ftui serve RUN --port 0 --detach                     # any free port; ftui watch prints the URL
  FTUI_API_KEY=secret ftui serve RUN --host 0.0.0.0    # beyond this machine: a key is required
  ftui serve RUN --lora other=runs/other-run           # a second LoRA adapter over the same base
  ftui stop RUN/serve/ID                               # stop a detached server

  curl http://127.0.0.1:8000/v1/chat/completions -H "Authorization: Bearer $FTUI_API_KEY" \\
       -H "Content-Type: application/json" \\
       -d '{"model": "NAME", "messages": [{"role": "user", "content": "Hello"}]}'

  import os
  from openai import OpenAI
  client = OpenAI(base_url="http://127.0.0.1:8000/v1", api_key=os.environ.get("FTUI_API_KEY", "none"))
  print(client.chat.completions.create(model="NAME", messages=[{"role": "user", "content": "Hello"}]).choices[0].message.content)

exit codes: 0 the server was stopped, 1 it failed (or could not start), 2 a usage error or a refused job,
130 Ctrl-C (the server goes on)""")


def add_parser(sub: Any) -> None:
    s = sub.add_parser("serve", help=_(HELP), description=_(
        "{what}. A job like training: it runs in its own session and outlives the terminal, listed in the runs screen, "
        "followed with ftui watch, stopped with ftui stop or the Serve screen. It listens on 127.0.0.1 unless told "
        "otherwise; any other address needs an API key (--api-key-file, or FTUI_API_KEY / API_KEY in the environment), "
        "which is never written to the job's files.").format(what=_(HELP)),
        epilog=_(EXAMPLES))
    s.add_argument("run", nargs="?", help=_("a run id (prefix) or directory: its final/ by default"))
    s.add_argument("--checkpoint", metavar="N", help=_("the run's checkpoint at step N instead of final/"))
    s.add_argument("--base", action="store_true", help=_("the base model the run started from"))
    s.add_argument("--model", help=_("a model directory outside any run (the job goes under the runs root)"))
    s.add_argument("--adapter", help=_("with --model: a LoRA adapter directory on top"))
    s.add_argument("--template", help=_("with --model: the chat template (default: the tokenizer's own)"))
    s.add_argument("--lora", action="append", default=[], metavar="NAME=PATH",
                   help=_("also serve a LoRA adapter over the same base as model NAME (PATH: an adapter directory or a LoRA "
                          "run's directory; repeatable)"))
    s.add_argument("--host", default="127.0.0.1", help=_("the address to listen on (default 127.0.0.1: this machine only)"))
    s.add_argument("--port", type=int, default=8000, help=_("the port (default 8000; 0: any free port, said once listening)"))
    s.add_argument("--api-key-file", metavar="FILE", help=_("a file holding the API key requests must send (Bearer); "
                                                            "without it FTUI_API_KEY or API_KEY from the environment, if set"))
    s.add_argument("--served-name", metavar="NAME", help=_("the model's id in /v1/models (default: the run's name)"))
    s.add_argument("--queue", type=int, default=8, metavar="N",
                   help=_("requests that may wait beyond the batch generating (default 8); more get 429 with Retry-After"))
    s.add_argument("--batch", type=int, default=8, metavar="N",
                   help=_("requests generated together when they share the model and sampling settings (default 8; "
                          "1: one at a time)"))
    s.add_argument("--max-tokens", type=int, default=4096, metavar="N",
                   help=_("the most tokens one answer may have; a request's max_tokens above it is cut to it (default 4096)"))
    s.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"), help=_("cpu, cuda or auto (default: a GPU if there is one)"))
    s.add_argument("--detach", action="store_true", help=_("start it and return (follow with ftui watch DIR, stop with ftui stop DIR)"))
    s.add_argument("--root", default=None, metavar="RUNS_ROOT", help=_("runs root (default: {root})").format(root=default_runs_root()))


class _StopFollowing(Exception):
    """Ctrl-C while following a server: the command stops following; the server goes on."""


def _lora_pairs(values: list[str]) -> list[tuple[str, str]] | str:
    pairs = []
    for value in values:
        name, sep, path = value.partition("=")
        if not sep or not name or not path:
            return _("--lora {value}: give NAME=PATH").format(value=value)
        pairs.append((name, path))
    return pairs


def cmd_serve(args: argparse.Namespace) -> int:
    from ftui.cli.console import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, error_line, refusal, safe_console
    from ftui.cli.runs import resolve_run_arg
    from ftui.ops.errors import OpError
    from ftui.ops.serve import start_serve

    out, err = safe_console(), safe_console(stderr=True)
    if (args.run is None) == (args.model is None):
        err.print(error_line(_("ftui serve: give a run (id or directory) or --model PATH, not both")))
        return EXIT_USAGE
    if args.model is None and (args.adapter or args.template):
        err.print(error_line(_("ftui serve: --adapter and --template go with --model (a run has its own)")))
        return EXIT_USAGE
    if args.checkpoint and args.base:
        err.print(error_line(_("ftui serve: --checkpoint or --base, not both")))
        return EXIT_USAGE
    adapters = _lora_pairs(args.lora)
    if isinstance(adapters, str):
        err.print(error_line(adapters))
        return EXIT_USAGE
    root = Path(args.root or default_runs_root()).expanduser()
    run_dir = model_config = None
    if args.run is not None:
        run_dir = resolve_run_arg(args.run, args.root, err)
        if run_dir is None:
            return EXIT_USAGE
    else:
        model_config = _model_config(args, root, err)
        if model_config is None:
            return EXIT_USAGE
    try:
        started = start_serve(run_dir=run_dir, checkpoint=args.checkpoint, base=args.base, model=args.model, adapter=args.adapter,
                              model_config=model_config, root=root, served_name=args.served_name, adapters=adapters,
                              host=args.host, port=args.port, api_key_file=args.api_key_file, queue_size=args.queue,
                              max_tokens_limit=args.max_tokens, device=args.device, max_batch=args.batch)
    except OpError as e:
        return refusal(err, e)
    job_dir = started.job_dir
    out.print(_("{job} job started in {path}").format(job="serve", path=escape(str(job_dir))), soft_wrap=True)
    stop_line = _("stop it with: ftui stop {path}").format(path=job_dir)
    if args.detach:
        out.print(escape(_("follow it with: ftui watch {path}").format(path=job_dir)), soft_wrap=True)
        out.print(escape(stop_line), soft_wrap=True)
        return EXIT_OK
    return _follow(job_dir, out, err, stop_line, (EXIT_OK, EXIT_FAILED, EXIT_INTERRUPTED))


def _follow(job_dir: Path, out: Any, err: Any, stop_line: str, codes: tuple[int, int, int]) -> int:
    """Follows the server until it ends (its URL, then its counters); Ctrl-C leaves it running."""
    from ftui.cli.follow import follow_run
    from ftui.cli.following import wait_for_exit

    def interrupted(_count: int) -> None:
        raise _StopFollowing

    try:
        summary = follow_run(job_dir, out, on_interrupt=interrupted)
    except _StopFollowing:
        err.print(escape(_("stopped following; the server goes on ({stop}; ftui watch {path} follows it again)").format(
            stop=stop_line, path=job_dir)), soft_wrap=True)
        return codes[2]
    wait_for_exit(job_dir, out)
    return codes[0] if summary.status == "stopped" else codes[1]


def _model_config(args: argparse.Namespace, root: Path, err: Any) -> Any:
    """The config of a model outside any run (its template and limits), as ftui predict makes it."""
    from ftui.cli.console import error_line
    from ftui.config.load import parse_config
    from ftui.config.model_checks import fitting_cutoff_len
    from ftui.config.problems import ConfigError
    from ftui.config.schema import RunConfig
    from ftui.rundir.paths import DEMO_DATASET

    data = {"model_name_or_path": args.model, "template": args.template, "dataset": DEMO_DATASET,  # no dataset is read
            "cutoff_len": fitting_cutoff_len(str(args.model), RunConfig.model_fields["cutoff_len"].default), "output_dir": str(root)}
    try:
        config, _warnings = parse_config(data, "--model")
    except ConfigError as e:
        err.print(error_line(str(e)))
        return None
    return config
