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
    ftui attach RUN                          the dashboard of a run, live or finished
    ftui watch RUN                           plain progress lines (no TTY needed)
    ftui runs                                list the runs under the runs root
    ftui delete RUN [--yes]                  delete a run that no job runs (asks first)

Every command that reads or writes runs takes --root RUNS_ROOT (train: --runs-root too, its old name).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from ftui.safety.bounded_input import YAMLRefused, load_yaml, short_repr
from ftui.cli.help import SuggestingParser, use_cell_width
from ftui.i18n import N_, _
from ftui.rundir.paths import default_runs_root
from ftui.safety.text import SafeConsole, VisibleWriter, visible

if TYPE_CHECKING:
    from ftui.config.schema import RunConfig

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
# Ctrl-C (128 + SIGINT, as a shell reports it): `ftui train` stopped the run (it resumes),
# `ftui watch` stopped watching (the run goes on).
EXIT_INTERRUPTED = 130
EXIT_CODES = N_("exit codes: 0 the run completed, 1 it failed or was stopped, 2 a usage or config error, "
                "130 Ctrl-C (train: the run was stopped and can be resumed; watch: the run goes on)")
# the plan's rows: the estimate's attribute, its label (translated where shown)
PLAN_PARTS = (("weights", N_("weights")), ("gradients", N_("gradients")), ("optimizer", N_("optimizer")),
              ("activations", N_("activations")))



def safe_console(stderr: bool = False) -> Console:
    """Every console here prints untrusted text (dataset records, run names, model output,
    failure reasons): a SafeConsole shows its control characters as escapes, to a terminal and a
    pipe alike (ftui.safety.text); callers escape markup, and emoji codes (``:x:``), which
    rich.markup.escape leaves alone, are never replaced. Lines are not broken at the console's
    width (80 columns when the output is not a terminal): a path or a command printed whole can
    be copied (the terminal wraps it)."""
    return SafeConsole(stderr=stderr, emoji=False, soft_wrap=True)


# Babel (on Python 3.11) cannot see a _() call inside an f-string: the labels are translated outside one.
def error_line(message: str) -> str:
    """``error: MESSAGE`` in red for a console (the message is escaped: it may quote a file)."""
    return "[red]{label}:[/] {message}".format(label=_("error"), message=escape(message))


def warning_line(message: str) -> str:
    return "[yellow]{label}:[/] {message}".format(label=_("warning"), message=escape(message))


def note_line(message: str) -> str:
    return "[yellow]{label}:[/] {message}".format(label=_("note"), message=escape(message))


def _parse_set(items: list[str]) -> dict[str, Any]:
    """--set KEY=VALUE pairs, each value read as YAML (max_steps=10 is a number); a malformed
    one ends the command with exit 2, saying which."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        problem = None
        if not sep or not key.strip():
            problem = _("--set expects key=value, got {item}").format(item=short_repr(item))
        else:
            try:
                out[key.strip()] = load_yaml(value)
            except YAMLRefused as e:
                problem = _("--set {key}: {value} is refused: {reason}").format(key=key.strip(), value=short_repr(value), reason=e)
            except yaml.YAMLError as e:
                where = getattr(e, "problem", None) or str(e).splitlines()[0]
                problem = _("--set {key}: {value} is not a YAML value ({reason}); quote it as a string, e.g. {key}='\"...\"'").format(
                    key=key.strip(), value=short_repr(value), reason=where)
        if problem:
            safe_console(stderr=True).print(error_line(problem))
            raise SystemExit(EXIT_USAGE)
    return out


def build_parser() -> argparse.ArgumentParser:
    root_help = _("runs root (default: {root})").format(root=default_runs_root())
    run_help = _("a run id (a unique prefix is enough) or a run directory")
    p = SuggestingParser(prog="ftui", description=_("Fine-tune language models from a terminal dashboard. "
                                "With no COMMAND: the app (launch form, dashboards, runs)."), epilog=_(EXIT_CODES))
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    t = sub.add_parser("train", help=_("start a run from a YAML config (LLaMA-Factory's keys) or the demo preset"),
                       epilog=_("Ctrl-C stops the run after the current step (a checkpoint is saved; it prints the resume "
                                "command; a second Ctrl-C kills). {exit_codes}").format(exit_codes=_(EXIT_CODES)))
    t.add_argument("config", nargs="?", metavar="CONFIG.yaml", help=_("a RunConfig YAML file (LLaMA-Factory's keys work)"))
    t.add_argument("--preset", choices=["demo"], help=_("the built-in demo: a tiny model learns a Q&A set on the CPU"))
    t.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE", help=_("override a config key (repeatable)"))
    t.add_argument("--detach", action="store_true", help=_("start the run and return at once"))
    t.add_argument("--node-rank", type=int, metavar="N", help=_("join node 0's multi-node run as node N, with the RUN/config.yaml (or --resume RUN --checkpoint) that node 0 printed"))
    t.add_argument("--root", dest="runs_root", metavar="RUNS_ROOT", help=_("where run directories go (default: the config's output_dir)"))
    t.add_argument("--runs-root", dest="runs_root", help=argparse.SUPPRESS)  # the old name, for scripts that use it
    t.add_argument("--resume", metavar="RUN", help=_("continue RUN (id, prefix or directory) from its newest complete checkpoint"))
    t.add_argument("--checkpoint", metavar="N", help=_("with --resume: the checkpoint's step number (or a checkpoint directory)"))
    t.add_argument("--allow-changed", action="store_true", help=_("with --resume (or resume_from_checkpoint): go on although the base "
                                                                  "model or the training data differ from what the run started with"))

    pl = sub.add_parser("plan", help=_("will it fit? estimate per-GPU memory (weights, gradients, optimizer, activations) and suggest what fits"))
    pl.add_argument("config", nargs="?", metavar="CONFIG.yaml", help=_("a RunConfig YAML file"))
    pl.add_argument("--preset", choices=["demo"], help=_("the built-in demo"))
    pl.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE", help=_("override a config key (repeatable)"))
    pl.add_argument("--gpu-memory", type=_positive, metavar="GIB", help=_("compare with GPUs of this many GiB (default: the smallest GPU the run uses: its gpus, else those CUDA_VISIBLE_DEVICES leaves)"))
    da = sub.add_parser("data", help=_("see what a run trains on: its examples as the runner encodes them (template, masking, truncation)"),
                        epilog=_("The examples come in dataset order, before shuffling and packing; those held out for eval "
                                 "(val_size) are left out. exit codes: 0 done, 1 the encoding failed (tokenizer, hub), "
                                 "2 a usage, config or dataset error"))
    da.add_argument("config", nargs="?", metavar="CONFIG.yaml", help=_("a RunConfig YAML file (its stage, template and cutoff_len apply)"))
    da.add_argument("--preset", choices=["demo"], help=_("the built-in demo"))
    da.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE", help=_("override a config key (repeatable)"))
    da.add_argument("--show", type=int, metavar="N", help=_("print the first N examples: token counts, the masked part (no loss) dimmed"))
    da.add_argument("--dump", metavar="OUT.jsonl", help=_('write every example, one {"input_ids": [...], "labels": [...]} a line (labels -100 where masked)'))
    da.add_argument("--force", action="store_true", help=_("with --dump: replace OUT.jsonl if it exists"))
    pr = sub.add_parser("presets", help=_("list the engine presets (single, ddp, fsdp, zero0-3 ...) and when to use each"))
    pr.add_argument("name", nargs="?", help=_("print this preset's file (to read or copy)"))

    c = sub.add_parser("chat", help=_("talk to a trained model: a streaming REPL, or one answer with --prompt"))
    c.add_argument("--run", help=_("a run id (prefix) or directory: its final/ (else its newest checkpoint)"))
    c.add_argument("--checkpoint", metavar="N", help=_("with --run: the checkpoint at step N instead of final/"))
    c.add_argument("--base", action="store_true", help=_("with --run: the base model the run started from (to compare)"))
    c.add_argument("--model", help=_("a model directory with weights (transformers' layout: a run's final/, an export, a downloaded model)"))
    c.add_argument("--adapter", help=_("with --model: a LoRA adapter directory on top"))
    c.add_argument("--prompt", help=_("answer this one prompt on stdout and exit (for scripts)"))
    c.add_argument("--system", default="", help=_("system prompt"))
    c.add_argument("--temperature", type=float, default=0.7, help=_("0 means greedy (default 0.7)"))
    c.add_argument("--top-p", type=float, default=0.9)
    c.add_argument("--max-new-tokens", type=int, default=256)
    c.add_argument("--device", default="auto", type=_chat_device, help=_("auto, cpu, cuda, cuda:1 ... (default: auto, a GPU if there is one)"))
    c.add_argument("--root", default=None, metavar="RUNS_ROOT", help=root_help)

    for kind, what in (("predict", _("generate a model's answers to a dataset's prompts and score them (BLEU-4, ROUGE) as LLaMA-Factory does")),
                       ("eval", _("a model's eval loss and perplexity over datasets (reward accuracy for preference stages)"))):
        j = sub.add_parser(kind, help=what, description=_("{what}. A job like training: detached, it outlives the app; "
                           "Ctrl-C stops it (what it did is kept); --detach returns at once.").format(what=what))
        j.add_argument("run", nargs="?", help=_("a run id (prefix) or directory: its final/ by default"))
        j.add_argument("--checkpoint", metavar="N", help=_("the run's checkpoint at step N instead of final/"))
        j.add_argument("--base", action="store_true", help=_("the base model the run started from (to compare)"))
        j.add_argument("--model", help=_("a model directory outside any run (with --template; the job goes under the runs root)"))
        j.add_argument("--adapter", help=_("with --model: a LoRA adapter directory on top"))
        j.add_argument("--template", help=_("with --model: the chat template (default: the tokenizer's own)"))
        j.add_argument("--dataset", required=True, help=_("dataset names (dataset_info.json) or files, comma separated"))
        j.add_argument("--dataset-dir", help=_("where dataset_info.json is (default: the run's dataset_dir)"))
        j.add_argument("--max-samples", type=int, help=_("the first N records of each dataset"))
        j.add_argument("--cutoff-len", type=int, metavar="N", help=_("tokens per example, prompt and answer shared as in training "
                                                                     "(default: the run's cutoff_len)"))
        j.add_argument("--nproc-per-node", type=int, default=1, help=_("processes (each takes a share of the examples; default 1)"))
        j.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"), help=_("cpu, cuda or auto (default: a GPU if there is one)"))
        j.add_argument("--detach", action="store_true", help=_("start it and return (follow with ftui watch DIR)"))
        j.add_argument("--root", default=None, metavar="RUNS_ROOT", help=root_help)
        if kind == "predict":
            j.add_argument("--max-new-tokens", type=int, default=512)
            j.add_argument("--temperature", type=float, default=0.95, help=_("0 means greedy (default 0.95, as LLaMA-Factory)"))
            j.add_argument("--top-p", type=float, default=0.7)
            j.add_argument("--batch-size", type=int, default=8, help=_("prompts generated together (left-padded)"))
        else:
            j.add_argument("--batch-size", type=int, help=_("examples scored together per process (default: the run's "
                                                            "per_device_eval_batch_size)"))

    from ftui.cli.export import add_parser as add_export_parser

    add_export_parser(sub)
    r = sub.add_parser("runs", help=_("list your runs (the default runs root's and those output_dir put elsewhere)"))
    r.add_argument("--root", default=None, metavar="RUNS_ROOT",
                   help=_("list only the runs under this directory (default: {root}, set by FTUI_HOME, plus the runs it indexes)").format(
                       root=default_runs_root()))

    d = sub.add_parser("delete", help=_("delete a run's directory (checkpoints and final/ included) and its run index entry; never a live run; "
                                                 "a run that is a symbolic link: only the link and its entry (what it points to is kept)"),
                       epilog=_("exit codes: 0 deleted, 1 not deleted (a live run, declined, or it could not be removed), 2 no such run"))
    d.add_argument("run", help=run_help)
    d.add_argument("--yes", "-y", action="store_true", help=_("do not ask (needed when stdin is not a terminal)"))
    d.add_argument("--root", default=None, metavar="RUNS_ROOT", help=root_help)

    a = sub.add_parser("attach", help=_("open the dashboard on a run (live or finished); quitting never stops it"))
    a.add_argument("run", help=run_help)
    a.add_argument("--root", default=None, metavar="RUNS_ROOT", help=root_help)

    w = sub.add_parser("watch", help=_("print plain progress lines until the run ends (for ssh without -t)"),
                       epilog=_("Ctrl-C stops watching, never the run. {exit_codes}").format(exit_codes=_(EXIT_CODES)))
    w.add_argument("run", help=run_help)
    w.add_argument("--root", default=None, metavar="RUNS_ROOT", help=root_help)
    w.add_argument("--interval", type=_positive, default=2.0, help=_("seconds between checks (default 2)"))

    p.add_argument("--root", dest="app_root", default=None, metavar="RUNS_ROOT",
                   help=_("runs root for the app, and for a command that takes --root (default: {root})").format(root=default_runs_root()))
    p.add_argument("--config", dest="app_config", default=None, metavar="CONFIG.yaml", help=_("open the launch form filled from this YAML"))
    from ftui import __version__

    p.add_argument("--version", action="version", version=f"ftui {__version__}", help=_("print ftui's version and exit"))
    use_cell_width(p)
    return p


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


def _chat_device(text: str) -> str:
    """An argparse type: auto, cpu, cuda or cuda:N (a torch device string would fail later,
    inside the model's process, in torch's words)."""
    if text in ("auto", "cpu", "cuda") or re.fullmatch(r"cuda:\d{1,2}", text):
        return text
    raise argparse.ArgumentTypeError(_("{value}: use auto, cpu, cuda or cuda:N").format(value=repr(text)))


def _positive(text: str) -> float:
    """An argparse type: a finite number above 0 (an interval, a memory size)."""
    import math

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(_("{value} is not a number").format(value=repr(text))) from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(_("{value} must be a number above 0").format(value=repr(text)))
    return value


def _dispatch(args: argparse.Namespace) -> int:
    if args.command is not None and not _apply_app_options(args):
        return EXIT_USAGE
    if args.command == "train":
        return cmd_train(args)
    if args.command == "runs":
        return cmd_runs(args)
    if args.command == "presets":
        return cmd_presets(args)
    if args.command == "plan":
        return cmd_plan(args)
    if args.command == "data":
        return cmd_data(args)
    if args.command == "chat":
        return cmd_chat(args)
    if args.command in ("predict", "eval"):
        return cmd_offline_job(args)
    if args.command == "export":
        from ftui.cli.export import cmd_export

        return cmd_export(args)
    if args.command == "attach":
        return cmd_attach(args)
    if args.command == "watch":
        return cmd_watch(args)
    if args.command == "delete":
        return cmd_delete(args)
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


def _resolve(ref: str, root: str | None, err: Console) -> Path | None:
    from ftui.rundir.runs import resolve_run

    try:
        return resolve_run(ref, root or default_runs_root())
    except LookupError as e:
        err.print(error_line(str(e)))
        return None


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


def cmd_attach(args: argparse.Namespace) -> int:
    from ftui.tui.app import FtuiApp

    run_dir = _resolve(args.run, args.root, safe_console(stderr=True))
    if run_dir is None:
        return EXIT_USAGE
    FtuiApp(args.root or default_runs_root(), attach=run_dir, offer_live=False).run()
    return EXIT_OK


def cmd_watch(args: argparse.Namespace) -> int:
    from ftui.cli.watch import watch_run

    run_dir = _resolve(args.run, args.root, safe_console(stderr=True))
    if run_dir is None:
        return EXIT_USAGE
    # Ctrl-C must reach us even when started with SIGINT ignored (a background job of a
    # non-interactive shell, where Python inherits SIG_IGN and never raises KeyboardInterrupt).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        status = watch_run(run_dir, interval=args.interval)
    except KeyboardInterrupt:  # watch only reads: the run is not touched
        print("\n" + _("stopped watching; the run goes on (ftui watch {run} or ftui attach {run} to follow it again)").format(
            run=visible(run_dir.name)), file=sys.stderr, flush=True)
        return EXIT_INTERRUPTED
    return EXIT_OK if status == "completed" else EXIT_FAILED


def _refused_live(run_dir: Path, summary: Any, err: Console, then: str = "") -> bool:
    """Says so when a live run is asked for something only a stopped run can have."""
    if summary.live:
        err.print(error_line(_("{run} is {status}: stop it first (ftui attach {run}, then s)").format(
            run=run_dir.name, status=summary.status) + then))
    return summary.live


def cmd_delete(args: argparse.Namespace) -> int:
    from ftui.rundir.runs import RunDeleteError, delete_plan, delete_run, summarize_run

    err = safe_console(stderr=True)
    run_dir = _resolve(args.run, args.root, err)
    if run_dir is None:
        return EXIT_USAGE
    summary = summarize_run(run_dir)
    if _refused_live(run_dir, summary, err, _("; nothing deleted")):  # before asking; delete_run checks again under the job lock
        return EXIT_FAILED
    plan = delete_plan(run_dir)  # what goes, said in the question: a run that is a link loses only the link
    if not args.yes:
        if not sys.stdin.isatty():
            err.print(error_line(_("not deleting {run} without a yes: stdin is not a terminal (add --yes)").format(run=run_dir.name)))
            return EXIT_FAILED
        try:
            answer = input(_("{question}\n  ({status}, step {step}/{max_steps}) [y/N] ").format(
                question=plan.question(), status=summary.status, step=summary.step, max_steps=summary.max_steps or "?"))
        except (EOFError, KeyboardInterrupt):
            answer = ""
        if answer.strip().lower() not in ("y", "yes", "是"):
            err.print(_("not deleted"))
            return EXIT_FAILED
    try:
        done = delete_run(plan.run, asked=plan)  # refused if the run changed since the question
    except RunDeleteError as e:
        err.print(error_line(str(e)))
        return EXIT_FAILED
    print(done.message())
    if done.leftovers:
        print(visible(done.leftovers))
    return EXIT_OK


# LLaMA-Factory's predict keys, read by _llamafactory_predict_args instead of the training config
LF_PREDICT_KEYS = ("do_train", "do_predict", "do_eval", "predict_with_generate", "adapter_name_or_path", "eval_dataset",
                   "per_device_eval_batch_size", "max_new_tokens", "temperature", "top_p", "do_sample", "output_dir")


def _llamafactory_predict_args(args: argparse.Namespace, err: Console) -> argparse.Namespace | bool | None:
    """A LLaMA-Factory predict YAML (``do_predict: true``, ``predict_with_generate: true``, no
    ``do_train``) as ftui predict's arguments: ``eval_dataset`` scored, ``model_name_or_path``
    with ``adapter_name_or_path`` on it, the job under ``output_dir``. None: a training YAML;
    False: a predict YAML with a problem (said)."""
    if not args.config or args.preset:
        return None
    import yaml

    try:
        data = load_yaml(Path(args.config).expanduser().read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None  # the training path reports it
    if not isinstance(data, dict) or not data.get("do_predict") or data.get("do_train"):
        return None
    data.update(_parse_set(args.overrides))
    if not data.get("predict_with_generate"):
        err.print(error_line(_("do_predict without predict_with_generate scores no answers; set predict_with_generate: "
                               "true (answers and BLEU / ROUGE), or use ftui eval RUN --dataset NAMES for the eval loss")))
        return False
    adapter = data.get("adapter_name_or_path")
    if isinstance(adapter, str) and "," in adapter:
        err.print(error_line(_("adapter_name_or_path names several adapters; ftui predicts with one (merge the others first)")))
        return False
    dataset = data.get("eval_dataset") or data.get("dataset")
    if not dataset or not data.get("model_name_or_path"):
        err.print(error_line(_("a predict YAML needs model_name_or_path and eval_dataset")))
        return False
    try:
        temperature = _number(data, "temperature", 0.95, float) if data.get("do_sample", True) else 0.0
        top_p = _number(data, "top_p", 0.7, float)
        max_new_tokens = _number(data, "max_new_tokens", 1024, int)
        batch_size = _number(data, "per_device_eval_batch_size", 8, int)
        max_samples = _number(data, "max_samples", None, int)
    except ValueError as e:
        err.print(error_line(str(e)))
        return False
    model_data = {k: v for k, v in data.items() if k not in LF_PREDICT_KEYS and k not in ("dataset", "stage")}
    return argparse.Namespace(
        command="predict", run=None, checkpoint=None, base=False, model=str(data["model_name_or_path"]),
        adapter=str(adapter) if adapter else None, template=data.get("template"), dataset=str(dataset),
        dataset_dir=data.get("dataset_dir"), max_samples=max_samples, nproc_per_node=1, device="auto", cutoff_len=None,
        detach=args.detach, root=str(data.get("output_dir") or default_runs_root()),
        max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p,
        batch_size=batch_size, model_data=model_data, model_source=str(args.config))


def _sampling_ok(temperature: float, top_p: float) -> bool:
    """Temperature 0 or more, top-p in (0, 1]; NaN fails both (written so that it does)."""
    return temperature >= 0 and 0 < top_p <= 1


def _number(data: dict[str, Any], key: str, default: Any, kind: type) -> Any:
    """A predict YAML's number, or ValueError naming the key and the value."""
    value = data.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (kind is int and value != int(value)):
        raise ValueError(_("{key}: {value} is not a {kind}").format(
            key=key, value=short_repr(value), kind=_("whole number") if kind is int else _("number")))
    return kind(value)


def _load_train_config(args: argparse.Namespace, err: Console, data_needed: bool = True) -> RunConfig | None:
    """The config of ftui train / data / plan, checked; ``data_needed`` False (plan --gpu-memory,
    for another machine): the datasets need not be here, only a registry entry that names them
    must be sound."""
    from ftui.config.problems import ConfigError
    from ftui.config.load import demo_data, load_config, parse_config

    if args.preset and args.config:
        err.print(error_line(_("give a CONFIG.yaml or --preset {preset}, not both (--set changes a key of either)").format(preset=args.preset)))
        return None
    overrides = _parse_set(args.overrides)
    if args.node_rank is not None:
        overrides["node_rank"] = args.node_rank
    if args.runs_root:
        overrides["output_dir"] = args.runs_root
    try:
        if args.preset == "demo":  # the preflight the launch form runs too (ftui.config.preflight)
            cfg, warnings = parse_config(demo_data(**overrides), "demo preset", data_needed=data_needed)
        elif args.config:
            cfg, warnings = load_config(args.config, overrides, data_needed=data_needed)
        else:
            err.print(_("ftui {command}: give a CONFIG.yaml or --preset demo").format(command=args.command))
            return None
    except ConfigError as e:
        err.print(error_line(str(e)))
        return None
    from ftui.plan.model_files import download_warning

    for w in [*warnings, download_warning(cfg.model_name_or_path, cfg.model_init == "random")]:
        if w:
            err.print(warning_line(w))
    if cfg.trust_remote_code:
        err.print(warning_line(_("trust_remote_code is on: Python code from the model's repository will run in the training processes")))
    return cfg


def _trust_remote_code_warning() -> str:
    """Said on every path that starts or resumes a run with trust_remote_code on."""
    return _("trust_remote_code is on: Python code from the model's repository will run in the training processes")


def _prepare_resume(args: argparse.Namespace, err: Console) -> tuple[Path, RunConfig, Path, int] | None:
    """The run directory, its config (with --set overrides), the checkpoint to resume and the
    run directory's job lock (two resumes at once must not both start: the lock decides).
    Nothing is written to the run until every check passed: a refused resume leaves its
    config.yaml, events, Stop request and status as they were."""
    import os

    from ftui.jobs.launch import RunBusy, lock_run_dir
    from ftui.rundir.runs import FINAL_DIR, checkpoints, live_job_dirs, reason_text, summarize_run

    if args.config or args.preset:
        err.print(error_line(_("--resume continues a run with its own config.yaml; give no CONFIG or --preset (use --set to change a key)")))
        return None
    run_dir = _resolve(args.resume, args.runs_root, err)
    if run_dir is None:
        return None
    summary = summarize_run(run_dir)
    if _refused_live(run_dir, summary, err):
        return None
    if summary.status == "unreadable":
        err.print(error_line(_("{run} is unreadable: {reason}").format(run=run_dir.name, reason=reason_text(summary.reason))))
        return None
    if summary.status == "completed" and not args.checkpoint:
        if not checkpoints(run_dir):  # save_strategy: no kept none: a raised max_steps would fail on it
            message = _("{run} has completed ({step} steps) and kept no checkpoint (save_strategy: no), so it cannot "
                        "be trained further; to fine-tune its result anew, start a run with model_name_or_path: {final}")
        elif not args.overrides:  # it would run no step and start the run's record again (its start, its duration)
            message = _("{run} has completed ({step} steps): there is nothing to resume. To train it further, raise "
                        "max_steps or num_train_epochs: ftui train --resume {run} --set max_steps=N; to fine-tune its "
                        "result anew, start a run with model_name_or_path: {final}")
        else:
            message = None
        if message is not None:
            err.print(error_line(message.format(run=run_dir.name, step=summary.step, final=run_dir / FINAL_DIR)))
            return None
    try:
        lock = lock_run_dir(run_dir, clear_stop=False)
    except RunBusy as e:
        err.print(error_line(str(e)))
        return None
    except OSError as e:
        err.print(error_line(_("cannot lock {path}: {reason}").format(path=run_dir, reason=e.strerror or e)))
        return None
    busy = live_job_dirs(run_dir)  # a predict / eval / export job reads final/ or a checkpoint the resume replaces
    if busy:
        err.print(error_line(_("{run} has a {job} job running ({path}) that reads its weights: stop it first (ftui attach {path}, "
                               "then s), then resume; nothing changed").format(run=run_dir.name, job=busy[0].parent.name, path=busy[0])))
        os.close(lock)
        return None
    found = _resume_config(args, run_dir, err)
    if found is None:
        os.close(lock)
        return None
    return (*found, lock)


def _resume_config(args: argparse.Namespace, run_dir: Path, err: Console) -> tuple[Path, RunConfig, Path] | None:
    """With the run's lock held: its config with the overrides and the checkpoint, checked
    (resume_checks) before the config, the fingerprint or the Stop request are written."""
    from ftui.data import fingerprint as data_fingerprint
    from ftui.config.problems import ConfigError
    from ftui.config.load import load_config
    from ftui.rundir.paths import STOP_FILE
    from ftui.rundir.runs import CONFIG_FILE, CheckpointError, resolve_checkpoint

    overrides = _parse_set(args.overrides)
    try:
        saved, _warnings = load_config(run_dir / CONFIG_FILE)
        cfg, _warnings = load_config(run_dir / CONFIG_FILE, overrides) if overrides else (saved, _warnings)
        skipped: list[str] = []
        ckpt = resolve_checkpoint(run_dir, args.checkpoint, skipped)
    except (ConfigError, CheckpointError) as e:
        err.print(error_line(str(e)))
        return None
    for line in skipped:
        err.print(warning_line(_("{problem}; resuming from {checkpoint} instead").format(problem=line, checkpoint=ckpt.name)))
    fingerprint = data_fingerprint.compute(cfg)
    if not _resume_accepted(args, run_dir, saved, cfg, ckpt, fingerprint, err):
        return None
    try:
        if overrides:
            cfg.save(run_dir / CONFIG_FILE, include_unsupported=False)
        data_fingerprint.record(run_dir, fingerprint)  # what the resumed steps train on: the next resume compares with it
        (run_dir / STOP_FILE).unlink(missing_ok=True)
    except OSError as e:
        err.print(error_line(_("cannot write {path}: {reason}").format(path=e.filename or run_dir, reason=e.strerror or e)))
        return None
    return run_dir, cfg, ckpt


def _resume_accepted(args: argparse.Namespace, run_dir: Path, saved: RunConfig, cfg: RunConfig, ckpt: Path,
                     fingerprint: dict[str, Any], err: Console) -> bool:
    """Says what the resume changes and replaces; False (said why) when it must not go on:
    the checkpoint cannot load with these settings, or the base model or the data differ and
    the user did not say --allow-changed."""
    from ftui.data import fingerprint as data_fingerprint
    from ftui.rundir.paths import FINAL_DIR, TRAINER_STATE
    from ftui.rundir.resume_checks import GUARDED_KEYS, checkpoint_mismatch, config_changes, fingerprint_changes, shown_path
    from ftui.rundir.events import UnreadableFile
    from ftui.rundir.runs import checkpoints, read_trainer_state

    try:
        state = read_trainer_state(ckpt)
    except (OSError, ValueError, UnreadableFile) as e:
        err.print(error_line(_("{path} cannot be read ({error}); resume from an earlier checkpoint").format(path=ckpt / TRAINER_STATE, error=e)))
        return False
    mismatch = checkpoint_mismatch(ckpt.name, state if isinstance(state, dict) else {}, cfg)
    if mismatch:
        err.print(error_line(mismatch + " " + _("(nothing in {run} was changed)").format(run=run_dir.name)))
        return False
    changes = config_changes(saved.to_dict(include_unsupported=False), cfg.to_dict(include_unsupported=False))
    guarded = [_("{key}: {old} -> {new}").format(key=k, old=shown_path(a), new=shown_path(b)) for k, a, b in changes if k in GUARDED_KEYS]
    for k, a, b in changes:
        if k not in GUARDED_KEYS:
            err.print(note_line(_("this resume changes {key}: {old} -> {new}").format(key=k, old=short_repr(a), new=short_repr(b))))
    recorded = data_fingerprint.read(run_dir)
    if recorded is None:
        err.print(note_line(_("{run} has no data fingerprint (it was started before ftui recorded one): its dataset files cannot "
                              "be compared with the ones it trained on (once resumed, it records them for later resumes)").format(run=run_dir.name)))
    else:
        guarded += fingerprint_changes(recorded, fingerprint)
    if guarded:
        lines = "; ".join(guarded)
        if not args.allow_changed:
            err.print(error_line(_("resuming {run} would continue its checkpoint with another base model or other data ({changes}); "
                                   "nothing was changed. Start a new run for them, or add --allow-changed to resume anyway").format(
                run=run_dir.name, changes=lines)))
            return False
        err.print(warning_line(_("resuming {run} with changes you allowed: {changes}").format(run=run_dir.name, changes=lines)))
    from_step = state.get("step") if isinstance(state.get("step"), int) else -1
    replaced = [p.name for step, p in checkpoints(run_dir) if step > from_step]
    replaced += [FINAL_DIR + "/"] if (run_dir / FINAL_DIR).is_dir() else []
    if replaced:  # a completed run's final/ and the checkpoints after this one are written again
        err.print(note_line(_("resuming {run} from {checkpoint} replaces what it has after that step: {what} (each when the "
                              "resumed steps reach it; final/ when the run completes)").format(
            run=run_dir.name, checkpoint=ckpt.name, what=", ".join(replaced))))
    if cfg.trust_remote_code and not getattr(args, "trust_warned", False):  # the YAML's load said it already
        err.print(warning_line(_trust_remote_code_warning()))
    return True


def _as_resume_args(args: argparse.Namespace, cfg: RunConfig) -> argparse.Namespace:
    """LLaMA-Factory's ``resume_from_checkpoint: PATH`` as ``ftui train --resume RUN
    --checkpoint PATH``: the run it names goes on from that checkpoint (its newest, for a run
    directory), with the keys this YAML sets differently from the run's config.yaml applied
    as --set overrides, so the YAML's settings are the ones trained with, as in LLaMA-Factory."""
    import json

    from ftui.config.problems import ConfigError
    from ftui.config.load import read_run_config
    from ftui.rundir.runs import CONFIG_FILE, resume_target

    run_dir, ckpt = resume_target(cfg.resume_from_checkpoint)  # validated already: it exists and is ftui's
    try:
        saved = read_run_config(run_dir / CONFIG_FILE).to_dict(include_unsupported=False)
    except ConfigError:
        saved = {}
    own = ("output_dir", "run_name", "resume_from_checkpoint")
    changed = {k: v for k, v in cfg.to_dict(include_unsupported=False).items() if k not in own and saved.get(k) != v}
    return argparse.Namespace(**{**vars(args), "config": None, "preset": None, "resume": str(run_dir), "runs_root": None,
                                 "checkpoint": str(ckpt) if ckpt else None, "trust_warned": cfg.trust_remote_code,
                                 "overrides": [f"{k}={json.dumps(v)}" for k, v in changed.items()]})


def cmd_train(args: argparse.Namespace) -> int:
    from ftui.jobs.launch import RunBusy, other_node_commands, prepare_run, start_run

    out, err = safe_console(), safe_console(stderr=True)
    resume = lock = None
    if args.checkpoint and not args.resume:
        err.print(error_line(_("--checkpoint goes with --resume RUN")))
        return EXIT_USAGE
    if args.node_rank:
        return _join_run(args, out, err)
    if args.resume:
        found = _prepare_resume(args, err)
        if found is None:
            return EXIT_USAGE
        run_dir, cfg, resume, lock = found
    else:
        predict = _llamafactory_predict_args(args, err)
        if predict is not None:  # LLaMA-Factory's way in: do_predict + predict_with_generate, no do_train
            return cmd_offline_job(predict) if predict else EXIT_USAGE
        cfg = _load_train_config(args, err)
        if cfg is None:
            return EXIT_USAGE
        if cfg.resume_from_checkpoint:
            found = _prepare_resume(_as_resume_args(args, cfg), err)
            if found is None:
                return EXIT_USAGE
            run_dir, cfg, resume, lock = found
    if resume is None:
        try:
            run_dir = prepare_run(cfg)
        except OSError as e:
            err.print(error_line(_("cannot create a run directory under {path}: {reason}").format(path=cfg.output_dir, reason=e)))
            return EXIT_FAILED
    from ftui.rundir.events import EVENTS_FILE

    events_path = run_dir / EVENTS_FILE
    offset = events_path.stat().st_size if resume and events_path.exists() else 0
    try:
        info = start_run(run_dir, cfg, resume=resume, lock=lock)
    except RunBusy as e:
        err.print(error_line(str(e)))
        return EXIT_USAGE
    if resume:
        out.print(_("run {run} resumed from {checkpoint} in {path}").format(
            run=f"[bold]{escape(run_dir.name)}[/]", checkpoint=escape(resume.name), path=escape(str(run_dir))))
    else:
        out.print(_("run {run} started in {path}").format(run=f"[bold]{escape(run_dir.name)}[/]", path=escape(str(run_dir))))
    if cfg.nnodes > 1:  # the launcher's rendezvous arguments, for when the nodes do not meet (launch.json has it always)
        out.print(f"[dim]{escape(info['command_line'])}[/]")
        out.print(_("on each other node, run:"))
        for line in other_node_commands(cfg, run_dir, resume):
            out.print(f"  {escape(line)}")
    if args.detach:
        out.print(escape(_("follow it with: ftui attach {run}   (or: ftui watch {run})").format(run=run_dir.name)))
        return EXIT_OK
    summary, interrupted = _follow_job(run_dir, out, offset)
    from ftui.rundir.runs import checkpoints

    if summary.status != "completed" and checkpoints(run_dir):
        out.print(escape(_("resume with: ftui train --resume {run}").format(run=run_dir.name)))
    if summary.status == "completed":
        from ftui.rundir.paths import FINAL_DIR

        if (run_dir / FINAL_DIR).is_dir():  # where the result is, and what uses it
            out.print(escape(_("the trained model: {path} (ftui chat --run {run}; ftui predict {run} --dataset ...; "
                               "ftui export {run} --out DIR)").format(path=run_dir / FINAL_DIR, run=run_dir.name)), soft_wrap=True)
        return EXIT_OK
    return EXIT_INTERRUPTED if interrupted else EXIT_FAILED


# What Ctrl-C says while a training run / an offline job is followed: (first, second)
TRAIN_INTERRUPTS = (N_("stopping: the ranks finish the current step (Ctrl-C again to kill)"), N_("killing the run"))
JOB_INTERRUPTS = (N_("stopping: what is done is kept"), N_("killing the job"))


def _follow_job(job_dir: Path, out: Console, offset: int = 0, says: tuple[str, str] = TRAIN_INTERRUPTS) -> tuple[Any, bool]:
    """Follows a started job until it ends (Ctrl-C stops it, a second Ctrl-C kills it, each
    saying ``says``); returns its summary and whether the user interrupted it."""
    from ftui.cli.follow import follow_run
    from ftui.jobs.launch import stop_run

    interrupts = []

    def interrupted(count: int) -> None:
        interrupts.append(count)
        if count == 1:
            out.print("[yellow]" + _(says[0]) + "[/]")
            stop_run(job_dir)
            return
        said = stop_run(job_dir, force=True)  # said before: it may have ended gracefully meanwhile
        out.print("[red]" + _(says[1]) + "[/]" if said == _("killed") else "[dim]" + escape(said) + "[/]")

    return follow_run(job_dir, out, on_interrupt=interrupted, start_offset=offset), bool(interrupts)


def _join_run(args: argparse.Namespace, out: Console, err: Console) -> int:
    """``ftui train RUN/config.yaml --node-rank K`` (or ``--resume RUN --checkpoint N
    --node-rank K``): node K > 0 of a multi-node run joins the run directory node 0 made, on
    a filesystem the nodes share; its ranks write their part of each checkpoint there and its
    supervisor keeps its own records in RUN/nodes/node-K (ftui.jobs.launch.join_target)."""
    from ftui.config.problems import ConfigError
    from ftui.config.load import load_config
    from ftui.rundir.events import EVENTS_FILE
    from ftui.jobs.launch import RunBusy, join_target, start_run
    from ftui.rundir.paths import LOG_FILE, node_dir
    from ftui.rundir.runs import CONFIG_FILE, CheckpointError, resolve_checkpoint

    rank = args.node_rank
    if rank < 0:
        err.print(error_line(_("--node-rank must be 0 or more")))
        return EXIT_USAGE
    if args.preset or args.overrides or args.runs_root:
        err.print(error_line(_("--node-rank {rank} joins the run node 0 started, with that run's config: give no --preset, "
                               "--set or --root on this node (--set on node 0 changes the run's config)").format(rank=rank)))
        return EXIT_USAGE
    resume = None
    if args.resume:
        if args.config:
            err.print(error_line(_("--resume continues a run with its own config.yaml; give no CONFIG or --preset (use --set to change a key)")))
            return EXIT_USAGE
        run_dir = _resolve(args.resume, None, err)
        if run_dir is None:
            return EXIT_USAGE
        try:
            resume = resolve_checkpoint(run_dir, args.checkpoint)
        except CheckpointError as e:
            err.print(error_line(str(e)))
            return EXIT_USAGE
    else:
        run_dir = join_target(args.config) if args.config else None
        if run_dir is None:
            err.print(error_line(_("--node-rank {rank} joins the run node 0 started: give the config.yaml inside node 0's run "
                                   "directory, as node 0 printed it (ftui train RUN/config.yaml --node-rank {rank}), on a "
                                   "filesystem the nodes share. A run directory of this node's own would hold this node's "
                                   "part of every checkpoint, leaving the run's checkpoints incomplete").format(rank=rank)))
            return EXIT_USAGE
    try:
        cfg, warnings = load_config(run_dir / CONFIG_FILE)  # checked against this node's GPUs
    except ConfigError as e:
        err.print(error_line(str(e)))
        return EXIT_USAGE
    if rank >= cfg.nnodes:
        err.print(error_line(_("{run} is a run of {nnodes} node(s): node ranks 1 to {last} join it").format(
            run=run_dir.name, nnodes=cfg.nnodes, last=cfg.nnodes - 1) if cfg.nnodes > 1 else
            _("{run} is a one-node run: no other node joins it").format(run=run_dir.name)))
        return EXIT_USAGE
    for w in warnings:
        err.print(warning_line(w))
    if cfg.trust_remote_code:
        err.print(warning_line(_trust_remote_code_warning()))
    cfg = cfg.model_copy(update={"node_rank": rank})
    home = node_dir(run_dir, rank)
    offset = (home / EVENTS_FILE).stat().st_size if (home / EVENTS_FILE).exists() else 0
    try:
        info = start_run(run_dir, cfg, resume=resume)
    except RunBusy as e:
        err.print(error_line(str(e)))
        return EXIT_USAGE
    except OSError as e:
        err.print(error_line(_("cannot start node {node} in {path}: {reason}").format(node=rank, path=home, reason=e)))
        return EXIT_FAILED
    out.print(_("node {node} joined run {run} in {path}; its ranks write their part of each checkpoint there").format(
        node=rank, run=f"[bold]{escape(run_dir.name)}[/]", path=escape(str(run_dir))))
    out.print(f"[dim]{escape(info['command_line'])}[/]")
    out.print(escape(_("the run's progress: ftui attach {path} (node 0 writes its events); this node's log: {log}").format(
        path=run_dir, log=home / LOG_FILE)))
    if args.detach:
        return EXIT_OK
    summary, interrupted = _follow_job(home, out, offset)
    if summary.status == "completed":
        return EXIT_OK
    return EXIT_INTERRUPTED if interrupted else EXIT_FAILED


def cmd_offline_job(args: argparse.Namespace) -> int:
    """ftui predict / ftui eval: prepare the job's directory, start it detached, follow it."""
    from ftui.config.problems import ConfigError
    from ftui.config.load import parse_config
    from ftui.jobs.launch import RunBusy
    from ftui.jobs.offline import JobError, prepare_job, source_of, start_job

    out, err = safe_console(), safe_console(stderr=True)
    kind = args.command
    if (args.run is None) == (args.model is None):
        err.print(_("ftui {command}: give a run (id or directory) or --model PATH, not both").format(command=kind))
        return EXIT_USAGE
    if args.model is None and (args.adapter or args.template):
        err.print(_("ftui {command}: --adapter and --template go with --model (a run has its own)").format(command=kind))
        return EXIT_USAGE
    if args.checkpoint and args.base:
        err.print(_("ftui {command}: --checkpoint or --base, not both").format(command=kind))
        return EXIT_USAGE
    for name in ("max_samples", "batch_size", "max_new_tokens", "nproc_per_node"):
        value = getattr(args, name, None)
        if value is not None and value < 1:
            err.print(_("ftui {command}: {option} must be 1 or more").format(command=kind, option="--" + name.replace("_", "-")))
            return EXIT_USAGE
    cutoff_len = getattr(args, "cutoff_len", None)
    if cutoff_len is not None and not 8 <= cutoff_len <= 1_048_576:
        err.print(_("ftui {command}: --cutoff-len must be between 8 and 1048576").format(command=kind))
        return EXIT_USAGE
    run_dir = model_config = None
    root = Path(args.root or default_runs_root()).expanduser()
    if args.run is not None:
        run_dir = _resolve(args.run, args.root, err)
        if run_dir is None:
            return EXIT_USAGE
    else:
        data = getattr(args, "model_data", None) or {"model_name_or_path": args.model, "template": args.template}
        if cutoff_len is not None:
            data = {**data, "cutoff_len": cutoff_len}
        elif "cutoff_len" not in data:  # none given: the default, or the model's limit below it
            from ftui.config.schema import RunConfig
            from ftui.config.model_checks import fitting_cutoff_len

            data = {**data, "cutoff_len": fitting_cutoff_len(str(args.model), RunConfig.model_fields["cutoff_len"].default)}
        try:
            model_config, _warnings = parse_config({**data, "dataset": args.dataset, "dataset_dir": args.dataset_dir or data.get("dataset_dir", "data"),
                                            "output_dir": str(root)}, getattr(args, "model_source", "--model"))
        except ConfigError as e:
            err.print(error_line(str(e)))
            return EXIT_USAGE
    generation = {k: getattr(args, k) for k in ("max_new_tokens", "temperature", "top_p", "batch_size") if hasattr(args, k)} if kind == "predict" else {}
    if not _sampling_ok(generation.get("temperature", 0), generation.get("top_p", 1)):
        err.print(escape(_("ftui {command}: --temperature must be 0 or more and --top-p in (0, 1]").format(command=kind)))
        return EXIT_USAGE
    source = source_of(run_dir, args.checkpoint, args.base, args.model, args.adapter)
    problem = _offline_source_problem(run_dir, args)
    if problem:
        err.print(error_line(problem))
        return EXIT_USAGE
    try:
        job_dir, cfg = prepare_job(kind, run_dir=run_dir, source=source, dataset=args.dataset, dataset_dir=args.dataset_dir,
                                   max_samples=args.max_samples, generation=generation, nproc=args.nproc_per_node,
                                   device=args.device, model_config=model_config, root=root, cutoff_len=cutoff_len,
                                   eval_batch_size=args.batch_size if kind == "eval" else None)
    except (JobError, ConfigError, OSError) as e:
        err.print(error_line(str(e)))
        return EXIT_USAGE if not isinstance(e, OSError) else EXIT_FAILED
    try:
        start_job(kind, job_dir, cfg)
    except RunBusy as e:
        err.print(error_line(str(e)))
        return EXIT_USAGE
    out.print(_("{job} job started in {path}").format(job=kind, path=escape(str(job_dir))), soft_wrap=True)
    if args.detach:
        out.print(escape(_("follow it with: ftui watch {path}").format(path=job_dir)))
        return EXIT_OK
    summary, interrupted = _follow_job(job_dir, out, says=JOB_INTERRUPTS)
    out.print(escape(str(job_dir)), soft_wrap=True)  # the last line: the job's directory, whole (scripts read it)
    if summary.status == "completed":
        return EXIT_OK
    return EXIT_INTERRUPTED if interrupted else EXIT_FAILED


def _offline_source_problem(run_dir: Path | None, args: argparse.Namespace) -> str | None:
    """A checkpoint that is not there, a run without weights, a model path that is not a model:
    said before the job starts."""
    from ftui.rundir.paths import FINAL_DIR

    if run_dir is None:
        from ftui.rundir.paths import resolve_model_path

        if not (Path(resolve_model_path(args.model)).expanduser() / "config.json").is_file():
            return _("{path} is not a model directory (no config.json); give a directory written by save_pretrained").format(path=args.model)
        if args.adapter and not (Path(args.adapter).expanduser() / "adapter_config.json").is_file():
            return _("{path} is not a LoRA adapter directory (no adapter_config.json)").format(path=args.adapter)
        return None
    if args.checkpoint:
        from ftui.rundir.runs import CheckpointError, resolve_checkpoint

        try:
            resolve_checkpoint(run_dir, str(args.checkpoint).removeprefix("step-"))
        except CheckpointError as e:
            return str(e)
    elif not args.base and not (run_dir / FINAL_DIR).is_dir():
        from ftui.rundir.runs import checkpoints

        if not checkpoints(run_dir):
            return _("{run} has no final/ and no checkpoint yet; use --base for the model it started from").format(run=run_dir.name)
    return None


def cmd_chat(args: argparse.Namespace) -> int:
    from ftui.jobs.chat_client import ChatWorker, Conversation, GenerationSettings

    err = safe_console(stderr=True)
    if bool(args.run) == bool(args.model):
        err.print(error_line(_("give either --run RUN or --model PATH")))
        return EXIT_USAGE
    if args.model and (args.checkpoint or args.base):
        err.print(error_line(_("--checkpoint and --base go with --run (a --model directory is loaded as it is)")))
        return EXIT_USAGE
    if args.run and args.adapter:
        err.print(error_line(_("--adapter goes with --model (a run's adapter is its own final/ or checkpoint)")))
        return EXIT_USAGE
    if args.checkpoint and args.base:
        err.print(error_line(_("--checkpoint or --base, not both")))
        return EXIT_USAGE
    if not _sampling_ok(args.temperature, args.top_p) or args.max_new_tokens < 1:
        err.print(error_line(_("--temperature must be 0 or more, --top-p in (0, 1] and --max-new-tokens 1 or more")))
        return EXIT_USAGE
    if args.prompt is not None and not args.prompt.strip():
        err.print(error_line(_("--prompt is empty: give the message to answer (or leave --prompt out for a conversation)")))
        return EXIT_USAGE
    if args.run:
        run_dir = _resolve(args.run, args.root, err)
        if run_dir is None:
            return EXIT_USAGE
        spec: dict[str, Any] = {"run": str(run_dir), "checkpoint": args.checkpoint, "base": args.base}
    else:
        run_dir = None
        spec = {"model": args.model, "adapter": args.adapter}
    problem = _offline_source_problem(run_dir, args)  # said before a model is loaded, as predict does (exit 2)
    if problem is None and args.device.startswith("cuda"):
        from ftui.machine.gpu import gpu_count

        count, wanted = gpu_count(), int(args.device.partition(":")[2] or 0)
        if wanted >= count:
            problem = (_("no CUDA GPU was found on this machine (NVML sees none); use --device auto or cpu") if count == 0 else
                       _("--device {device}: this machine lets ftui use {n} GPU(s), cuda:0 to cuda:{last}").format(
                           device=args.device, n=count, last=count - 1))
    if problem:
        err.print(error_line(problem))
        return EXIT_USAGE
    settings = GenerationSettings(args.temperature, args.top_p, args.max_new_tokens, args.system)
    worker = ChatWorker()
    try:
        loaded = worker.load(device=args.device, **spec)
        if loaded["type"] != "loaded":
            err.print(error_line(loaded['message']))
            return EXIT_FAILED
        if loaded.get("note"):  # a GPU run on a machine without one: the CPU, in a precision it computes
            err.print(note_line(loaded["note"]))
        if args.prompt is not None:
            text, ok = _stream_answer(worker, Conversation().ask(args.prompt), settings)
            return EXIT_OK if ok else EXIT_FAILED
        err.print("[dim]" + escape(_("{model} on {device}. /clear forgets the conversation, /save FILE writes it as JSON, "
                                     "Ctrl-C stops an answer, Ctrl-D quits.").format(model=loaded["label"], device=loaded["device"])) + "[/]")
        conv = Conversation()
        while True:
            try:
                line = input("> ")
            except EOFError:
                print()
                return EXIT_OK
            except KeyboardInterrupt:
                print()
                continue
            if not line.strip():
                continue
            if line.strip() == "/clear":
                conv.clear()
                continue
            if line.startswith("/save "):
                target = line[6:].strip()
                try:
                    conv.save(target, settings, loaded["label"])
                except OSError as e:  # the conversation stays: another path can still take it
                    err.print(error_line(_("could not save the conversation to {path}: {reason}").format(
                        path=target, reason=e.strerror or e)))
                else:
                    err.print("[dim]" + escape(_("saved to {path}").format(path=target)) + "[/]")
                continue
            text, ok = _stream_answer(worker, conv.ask(line), settings)
            if ok:
                conv.answer(text)
            else:
                conv.messages.pop()
    finally:
        worker.close()


def _stream_answer(worker: Any, messages: list[dict[str, str]], settings: Any) -> tuple[str, bool]:
    """Prints tokens as they come, as plain text with control characters shown as escapes (one
    character at a time: an escape sequence split between two tokens is escaped too)."""
    rid = worker.generate(messages, settings)
    shown = VisibleWriter(sys.stdout)
    parts: list[str] = []
    while True:
        try:
            reply = worker.get(timeout=600)
        except KeyboardInterrupt:
            worker.stop()
            continue
        if reply is None:
            print("\n" + _("error: the chat worker stopped answering"), file=sys.stderr)
            return "".join(parts), False
        if reply.get("id") not in (None, rid):
            continue
        kind = reply["type"]
        if kind == "token":
            parts.append(reply["text"])
            shown.write(reply["text"])
            shown.flush()
        elif kind == "done":
            sys.stdout.write("\n")
            sys.stdout.flush()
            if sys.stderr.isatty():
                stats = _("{tokens} tokens, {rate:.1f} tokens/s").format(tokens=reply["tokens"], rate=reply.get("tokens_per_s") or 0)
                stopped = _(", stopped") if reply["stopped"] else ""
                print(f"[{stats}{stopped}]", file=sys.stderr)
            return "".join(parts), True
        elif kind in ("error", "exit"):
            print("\n" + _("error: {message}").format(message=visible(reply["message"])), file=sys.stderr)
            return "".join(parts), False


def cmd_plan(args: argparse.Namespace) -> int:
    """Exit 0 when it fits (or there is no GPU to compare with), 1 when it does not, 2 on bad input."""
    from ftui.plan.planner import GIB, SLACK, UnknownModel, count, gib, plan

    out, err = safe_console(), safe_console(stderr=True)
    args.node_rank = args.runs_root = None
    from contextlib import nullcontext

    from ftui.machine.facts import for_another_machine

    # --gpu-memory: planned for GPUs that need not be here (a login node): this machine's GPUs
    # and packages do not decide what is valid
    with for_another_machine() if args.gpu_memory else nullcontext():
        cfg = _load_train_config(args, err, data_needed=not args.gpu_memory)  # --gpu-memory: the data may be elsewhere
    if cfg is None:
        return EXIT_USAGE
    try:
        verdict = plan(cfg, int(args.gpu_memory * GIB) if args.gpu_memory else None)
    except (UnknownModel, ValueError) as e:
        err.print(error_line(str(e)))
        return EXIT_USAGE
    e = verdict.estimate
    out.print(escape(_("{model}: {params} parameters, {trainable} trainable ({method}, {precision}, engine {engine}, "
                       "{world_size} process(es), micro batch {batch} x {cutoff_len} tokens{checkpointing})").format(
        model=cfg.model_name_or_path, params=count(e.params), trainable=count(e.trainable), method=cfg.method,
        precision=cfg.precision_label, engine=cfg.engine_name, world_size=cfg.world_size, batch=cfg.per_device_train_batch_size,
        cutoff_len=cfg.cutoff_len, checkpointing=_(", gradient checkpointing") if cfg.gradient_checkpointing else "")))
    on_cpu = cfg.device == "cpu" and not args.gpu_memory  # host memory per process: no CUDA context, NCCL, GPU
    table = Table(show_header=True, box=None, pad_edge=False)
    table.add_column(_("per process (host memory)") if on_cpu else _("per GPU"))
    table.add_column(_("estimate"), justify="right")
    for name, label in PLAN_PARTS:
        table.add_row(_(label), gib(getattr(e, name)))
    overlap = _(" (gradients replace activations in backward)") if e.gradients_overlap_activations else ""
    table.add_row("[bold]" + _("peak") + "[/]" + overlap, f"[bold]{gib(e.total)}[/]")
    if not on_cpu:
        table.add_row(escape(e.overhead.describe()), gib(e.overhead.total))
        table.add_row(_("needed (peak x {slack} for the allocator + the above)").format(slack=SLACK), gib(e.needed))
    if e.host_bytes:
        table.add_row(_("host memory (offload)"), gib(e.host_bytes))
    out.print(table)
    for note in e.notes:
        out.print(note_line(note))
    if on_cpu:
        out.print(_("a CPU run (device: cpu): nothing to compare with a GPU"))
        return EXIT_OK
    if verdict.fits is None:
        out.print(_("no GPU seen (give --gpu-memory GIB to compare)"))
        return EXIT_OK
    if verdict.fits:
        out.print(_("{fits} {size} GPUs").format(fits="[green]" + _("fits") + "[/]", size=gib(verdict.gpu_bytes)))
        return EXIT_OK
    out.print(_("{fits} {size} GPUs").format(fits="[red]" + _("does not fit") + "[/]", size=gib(verdict.gpu_bytes)))
    for s in verdict.suggestions:
        out.print("  " + _("try {suggestion}").format(suggestion=escape(s)))
    if not verdict.suggestions:
        out.print("  " + _("nothing ftui offers makes it fit: more or larger GPUs"))
    return EXIT_FAILED


def cmd_data(args: argparse.Namespace) -> int:
    """The config's training examples, encoded by the runner in a child process."""
    from ftui.data.examples import EncodedExamples, ExamplesFailed, example_text

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
    cfg = _load_train_config(args, err)
    if cfg is None:
        return EXIT_USAGE
    examples = EncodedExamples(cfg, limit=args.show, text=target is None)
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


def _sweep_leftovers(root: Path, run_dirs: list[Path]) -> None:
    """What interrupted deletes (in the runs root) and exports (beside the runs' export out
    dirs) left, removed when certainly ftui's and abandoned (ftui.safety.owned_dirs); one line each on
    stderr, so the listing scripts read stays as it was."""
    from ftui.jobs.export import export_job_out_parents
    from ftui.jobs.export_out import sweep_leftovers
    from ftui.rundir.runs import sweep_deleting

    lines = [sweep_deleting(root), *(sweep_leftovers(p) for p in export_job_out_parents(run_dirs))]
    for line in filter(None, lines):
        safe_console(stderr=True).print(escape(line), soft_wrap=True)


def cmd_runs(args: argparse.Namespace) -> int:
    from rich.cells import cell_len

    from ftui.rundir.runs import LIST_COLUMNS, LIST_HEADINGS, RunsRootError, list_row, list_runs, reason_text

    root = args.root or default_runs_root()
    console = safe_console()
    if args.root and not Path(args.root).expanduser().is_dir():  # a typo must not read as "no runs"
        what = _("is not a directory") if Path(args.root).expanduser().exists() else _("does not exist")
        safe_console(stderr=True).print(error_line(_("the runs root {path} {what}; give the directory your runs are in").format(
            path=args.root, what=what)))
        return EXIT_USAGE
    try:
        runs = list_runs(root)
    except RunsRootError as e:
        safe_console(stderr=True).print(error_line(str(e)))
        return EXIT_FAILED
    _sweep_leftovers(Path(root).expanduser(), [r.path for r in runs])
    if not runs:
        console.print(escape(_("no runs under {path}").format(path=Path(root).resolve())))
        return EXIT_OK
    # the headings in the interface's language; the cells (statuses included) as the run says them
    header = tuple(_(LIST_HEADINGS[col]) for col in LIST_COLUMNS)
    rows = [tuple(visible(cell, one_line=True) for cell in list_row(r).values()) for r in runs]  # a cell's width as shown
    if not console.is_terminal:  # scripts and `ssh host ftui runs`: one unwrapped line per run
        widths = [max(cell_len(row[i]) for row in [header, *rows]) for i in range(len(header))]
        for row in [header, *rows]:  # padded by cells: a CJK character takes two
            print("  ".join(cell + " " * (w - cell_len(cell)) for cell, w in zip(row, widths)).rstrip())
    else:
        table = Table(title=escape(_("runs in {path}").format(path=Path(root).resolve())))
        for col, heading in zip(LIST_COLUMNS, header):  # a run's id whole, on one line: it is what `ftui attach` takes
            table.add_column(heading, no_wrap=col == "run",
                             min_width=max(cell_len(r.run_id) for r in runs) if col == "run" else None)
        for row in rows:
            table.add_row(*(escape(cell) for cell in row))
        console.print(table)
    for r in runs:  # why a run failed, died or cannot be read: one line each, under the table
        if r.status in ("failed", "died", "unreadable") and r.reason:
            why = " ".join(reason_text(r.reason).split())
            line = _("{run}: {status}: {reason}").format(run=r.run_id, status=r.status, reason=why[:300])
            if r.hint:
                line += " (" + " ".join(_(r.hint).split())[:300] + ")"
            if console.is_terminal:
                console.print(Text(visible(line)))
            else:
                print(visible(line))
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
