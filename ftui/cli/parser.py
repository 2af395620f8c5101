"""``ftui``'s argument parser: every command, its options and their help."""

from __future__ import annotations

import argparse

from ftui.cli.console import EXIT_CODES
from ftui.cli.help import SuggestingParser, use_cell_width
from ftui.cli.options import chat_device, positive
from ftui.i18n import _
from ftui.rundir.paths import default_runs_root


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
    from ftui.cli.slurm_flags import add_slurm_flags

    add_slurm_flags(t)

    pl = sub.add_parser("plan", help=_("will it fit? estimate per-GPU memory (weights, gradients, optimizer, activations) and suggest what fits"))
    pl.add_argument("config", nargs="?", metavar="CONFIG.yaml", help=_("a RunConfig YAML file"))
    pl.add_argument("--preset", choices=["demo"], help=_("the built-in demo"))
    pl.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE", help=_("override a config key (repeatable)"))
    pl.add_argument("--gpu-memory", type=positive, metavar="GIB", help=_("compare with GPUs of this many GiB (default: the smallest GPU the run uses: its gpus, else those CUDA_VISIBLE_DEVICES leaves)"))
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
    c.add_argument("--image", action="append", metavar="PATH",
                   help=_("an image sent with the prompt (repeat for several; a vision-language model such as Qwen2-VL); "
                          "without --prompt it goes with the conversation's first message. In the conversation, "
                          "/image PATH attaches one to the next message"))
    c.add_argument("--video", action="append", metavar="PATH",
                   help=_("a video sent with the prompt (repeat for several; Qwen2-VL, Qwen2.5-VL or Qwen3-VL, decoded as the "
                          "run's video_fps / video_maxlen / video_max_pixels say); /video PATH in the conversation"))
    c.add_argument("--system", default="", help=_("system prompt"))
    c.add_argument("--temperature", type=float, default=0.7, help=_("0 means greedy (default 0.7)"))
    c.add_argument("--top-p", type=float, default=0.9)
    c.add_argument("--max-new-tokens", type=int, default=256)
    c.add_argument("--device", default="auto", type=chat_device, help=_("auto, cpu, cuda, cuda:1 ... (default: auto, a GPU if there is one)"))
    c.add_argument("--root", default=None, metavar="RUNS_ROOT", help=root_help)

    for kind, what in (("predict", _("generate a model's answers to a dataset's prompts and score them (BLEU-4, ROUGE) as LLaMA-Factory does")),
                       ("eval", _("a model's eval loss and perplexity over datasets (reward accuracy for preference stages, mean reward for grpo)"))):
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
    from ftui.cli.serve import add_parser as add_serve_parser
    from ftui.cli.stop import add_parser as add_stop_parser

    add_serve_parser(sub)
    add_stop_parser(sub)
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
    w.add_argument("--interval", type=positive, default=2.0, help=_("seconds between checks (default 2)"))

    from ftui.rundir.rollout_query import SORTS

    ro = sub.add_parser("rollouts", help=_("a grpo or ppo run's rollouts: prompts, completions, per-function rewards (the browser, or --print)"),
                        epilog=_("exit codes: 0 done, 1 the run has no rollouts, 2 no such run or a usage error"))
    ro.add_argument("run", help=run_help)
    ro.add_argument("--root", default=None, metavar="RUNS_ROOT", help=root_help)
    shape = ro.add_mutually_exclusive_group()
    shape.add_argument("--print", action="store_true", help=_("print them as text instead of opening the browser"))
    shape.add_argument("--json", action="store_true", help=_("print them as JSON, one rollout a line"))
    ro.add_argument("--step", type=int, metavar="N", help=_("only the rollouts step N trains on"))
    ro.add_argument("--sort", choices=SORTS, default="newest", help=_("newest (step, newest first; the default), step, "
                                                                     "reward (highest first) or low-reward (lowest first)"))
    ro.add_argument("--search", metavar="TEXT", help=_("only rollouts whose prompt or completion holds TEXT"))
    ro.add_argument("--limit", type=int, metavar="N", help=_("with --print or --json: at most N rollouts (default 20)"))

    p.add_argument("--root", dest="app_root", default=None, metavar="RUNS_ROOT",
                   help=_("runs root for the app, and for a command that takes --root (default: {root})").format(root=default_runs_root()))
    p.add_argument("--config", dest="app_config", default=None, metavar="CONFIG.yaml", help=_("open the launch form filled from this YAML"))
    from ftui import __version__

    p.add_argument("--version", action="version", version=f"ftui {__version__}", help=_("print ftui's version and exit"))
    use_cell_width(p)
    return p

