"""``ftui chat``: talk to a trained model, a streaming REPL or one answer (``--prompt``)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from rich.markup import escape

from ftui.cli.console import EXIT_FAILED, EXIT_OK, EXIT_USAGE, error_line, note_line, safe_console
from ftui.cli.options import sampling_ok
from ftui.cli.runs import resolve_run_arg
from ftui.i18n import _
from ftui.ops.jobs import source_problem
from ftui.safety.text import VisibleWriter, visible


def cmd_chat(args: argparse.Namespace) -> int:
    from ftui.jobs.chat_client import ChatWorker, Conversation, GenerationSettings, image_problem, video_problem

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
    if not sampling_ok(args.temperature, args.top_p) or args.max_new_tokens < 1:
        err.print(error_line(_("--temperature must be 0 or more, --top-p in (0, 1] and --max-new-tokens 1 or more")))
        return EXIT_USAGE
    if args.prompt is not None and not args.prompt.strip():
        err.print(error_line(_("--prompt is empty: give the message to answer (or leave --prompt out for a conversation)")))
        return EXIT_USAGE
    media: dict[str, list[str]] = {"images": [], "videos": []}
    for kind, given_paths in (("images", getattr(args, "image", None) or []), ("videos", getattr(args, "video", None) or [])):
        for given in given_paths:
            path = os.path.abspath(os.path.expanduser(given))
            problem = (image_problem if kind == "images" else video_problem)(path)
            if problem:  # before a model is loaded (exit 2)
                err.print(error_line(problem.replace(path, given, 1)))
                return EXIT_USAGE
            media[kind].append(path)
    if args.run:
        run_dir = resolve_run_arg(args.run, args.root, err)
        if run_dir is None:
            return EXIT_USAGE
        spec: dict[str, Any] = {"run": str(run_dir), "checkpoint": args.checkpoint, "base": args.base}
    else:
        run_dir = None
        spec = {"model": args.model, "adapter": args.adapter}
    problem = source_problem(run_dir, checkpoint=args.checkpoint, base=args.base, model=args.model,
                             adapter=args.adapter)  # said before a model is loaded, as predict does (exit 2)
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
            text, ok = stream_answer(worker, Conversation().ask(args.prompt, media["images"], media["videos"]), settings)
            return EXIT_OK if ok else EXIT_FAILED
        err.print("[dim]" + escape(_("{model} on {device}. /image PATH or /video PATH attaches a file to your next message, /clear forgets "
                                     "the conversation, /save FILE writes it as JSON, Ctrl-C stops an answer, Ctrl-D quits.").format(
            model=loaded["label"], device=loaded["device"])) + "[/]")
        conv = Conversation()
        pending = media  # --image / --video without --prompt: sent with the first message
        if pending["images"] or pending["videos"]:
            err.print("[dim]" + escape(_("{n} image(s) and {m} video(s) attached to your next message").format(
                n=len(pending["images"]), m=len(pending["videos"]))) + "[/]")
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
                pending = {"images": [], "videos": []}
                continue
            if attach_command(line, pending, err):
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
            text, ok = stream_answer(worker, conv.ask(line, pending["images"], pending["videos"]), settings)
            pending = {"images": [], "videos": []}  # sent with this message (and with it in the history after)
            if ok:
                conv.answer(text)
            else:
                conv.messages.pop()
    finally:
        worker.close()


def attach_command(line: str, pending: dict[str, list[str]], err: Any) -> bool:
    """The REPL's ``/image PATH`` and ``/video PATH``: the file checked, then attached to the
    next message (several allowed); False for any other line."""
    from ftui.jobs.chat_client import image_problem, video_problem

    command, _sep, rest = line.strip().partition(" ")
    if command not in ("/image", "/video"):
        return False
    given = rest.strip()
    if not given:
        err.print(error_line(_("{command} needs a file: {command} PATH").format(command=command)))
        return True
    path = os.path.abspath(os.path.expanduser(given))
    problem = (image_problem if command == "/image" else video_problem)(path)
    if problem:
        err.print(error_line(problem.replace(path, given, 1)))
        return True
    pending["images" if command == "/image" else "videos"].append(path)
    err.print("[dim]" + escape(_("attached {path}: {n} image(s) and {m} video(s) go with your next message").format(
        path=given, n=len(pending["images"]), m=len(pending["videos"]))) + "[/]")
    return True


def stream_answer(worker: Any, messages: list[dict[str, str]], settings: Any) -> tuple[str, bool]:
    """Prints tokens as they come, as plain text with control characters shown as escapes (one
    character at a time: an escape sequence split between two tokens is escaped too). The
    replies are decoded by ftui.jobs.chat_reply, as the app's chat screen decodes them."""
    from ftui.jobs.chat_reply import Done, Failed, Token, decode_reply

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
        part = decode_reply(reply, rid)
        if isinstance(part, Token):
            parts.append(part.text)
            shown.write(part.text)
            shown.flush()
        elif isinstance(part, Done):
            sys.stdout.write("\n")
            sys.stdout.flush()
            if sys.stderr.isatty():
                stats = _("{tokens} tokens, {rate:.1f} tokens/s").format(tokens=part.tokens, rate=part.rate)
                stopped = _(", stopped") if part.stopped else ""
                print(f"[{stats}{stopped}]", file=sys.stderr)
            return "".join(parts), True
        elif isinstance(part, Failed):
            print("\n" + _("error: {message}").format(message=visible(part.message)), file=sys.stderr)
            return "".join(parts), False
