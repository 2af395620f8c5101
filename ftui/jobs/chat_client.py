"""The app's side of the chat worker: start ``python -m ftui.runner chat``, send requests,
receive its JSON-line replies. No torch here (the dashboard and the CLI use it).

Replies are read by a daemon thread into a queue, so a caller can wait with a timeout and
never blocks on a worker that crashed: a closed stdout becomes an ``exit`` reply with the
worker's last stderr lines. What the replies mean is decoded once, by ftui.jobs.chat_reply
(the CLI's REPL and the app's chat screen both use it).
"""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from ftui.i18n import _
from ftui.jobs.torch_env import torch_process_env


@dataclass
class GenerationSettings:
    temperature: float = 0.7
    top_p: float = 0.9
    max_new_tokens: int = 256
    system: str = ""

    def request(self) -> dict[str, Any]:
        out: dict[str, Any] = {"temperature": self.temperature, "top_p": self.top_p, "max_new_tokens": self.max_new_tokens}
        if self.system:
            out["system"] = self.system
        return out


@dataclass
class Conversation:
    """The multi-turn history sent with every prompt; saved as JSON on request. A user turn's
    images and videos (file paths) stay with it (``"images"``, ``"videos"``: the chat worker's protocol), so every later
    prompt sends them again with their turn."""

    messages: list[dict[str, Any]] = field(default_factory=list)

    def ask(self, text: str, images: list[str] | None = None, videos: list[str] | None = None) -> list[dict[str, Any]]:
        turn: dict[str, Any] = {"role": "user", "content": text}
        if images:
            turn["images"] = list(images)
        if videos:
            turn["videos"] = list(videos)
        self.messages.append(turn)
        return list(self.messages)

    def answer(self, text: str) -> None:
        self.messages.append({"role": "assistant", "content": text})

    def clear(self) -> None:
        self.messages.clear()

    def save(self, path: str, settings: GenerationSettings, model: str,
             compared_with: dict[str, Any] | None = None) -> None:
        """``compared_with``: the other side of a comparison (``{"model": ..., "messages": ...}``),
        saved beside this one so a comparison is kept whole."""
        data: dict[str, Any] = {"model": model, "settings": settings.request(), "messages": self.messages}
        if compared_with is not None:
            data["compared_with"] = compared_with
        from ftui.safety.files import replacing

        with replacing(path) as fh:  # a typed path: no link there is followed, no predictable temporary name
            json.dump(data, fh, indent=1, ensure_ascii=False)


def image_problem(path: str) -> str | None:
    """Why the image file at ``path`` cannot go with a message (missing, not an image, too
    large: ftui.data.media_files), said before it is sent; None for a good one."""
    import os

    from ftui.data.media_files import MediaError, checked_image_file

    try:
        checked_image_file(os.path.expanduser(path))
    except MediaError as err:
        return str(err)
    return None


def video_problem(path: str) -> str | None:
    """Why the video file at ``path`` cannot go with a message (missing, not a video FFmpeg
    reads, no PyAV: ftui.data.video_files, its header only; the chat worker decodes it), said
    before it is sent; None for a good one."""
    import os

    from ftui.data.media_files import MediaError
    from ftui.data.video_files import checked_video_file

    try:
        checked_video_file(os.path.expanduser(path), decode=False)
    except MediaError as err:
        return str(err)
    return None


class ChatWorker:
    """One worker process holding one model."""

    def __init__(self, python: str | None = None):
        self.proc = subprocess.Popen(
            [python or sys.executable, "-m", "ftui.runner", "chat"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, encoding="utf-8", bufsize=1,
            env=torch_process_env(),  # PCI order unless the user chose one: the app's cuda:N (ftui.machine.gpu) is the worker's
        )
        self.replies: queue.Queue[dict[str, Any]] = queue.Queue()
        self.stderr_tail: deque[str] = deque(maxlen=20)
        self.next_id = 0
        self._send_lock = threading.Lock()  # a stop (its own thread) and a prompt (the stream's) must not interleave
        threading.Thread(target=self._read_stdout, daemon=True).start()
        threading.Thread(target=self._read_stderr, daemon=True).start()

    def _read_stdout(self) -> None:
        for line in self.proc.stdout:
            try:
                reply = json.loads(line)
            except ValueError:
                continue
            if isinstance(reply, dict):
                self.replies.put(reply)
        self.proc.wait()
        tail = "\n".join(self.stderr_tail)
        message = _("the chat worker exited (code {code}): {output}").format(code=self.proc.returncode, output=tail[-1500:])
        self.replies.put({"type": "exit", "code": self.proc.returncode, "message": message})

    def _read_stderr(self) -> None:
        for line in self.proc.stderr:
            self.stderr_tail.append(line.rstrip())

    def send(self, op: str, **fields: Any) -> None:
        try:
            with self._send_lock:
                self.proc.stdin.write(json.dumps({"op": op, **fields}) + "\n")
                self.proc.stdin.flush()
        except (BrokenPipeError, OSError, ValueError):
            pass  # the exit reply tells the reader

    def get(self, timeout: float | None = None) -> dict[str, Any] | None:
        try:
            return self.replies.get(timeout=timeout)
        except queue.Empty:
            return None

    def wait_for(self, *kinds: str, timeout: float = 600.0) -> dict[str, Any]:
        """The next reply of one of ``kinds`` (or an error / exit)."""
        while True:
            reply = self.get(timeout)
            if reply is None:
                return {"type": "error", "message": _("the chat worker did not answer in {seconds} s").format(seconds=f"{timeout:.0f}")}
            if reply["type"] in kinds or reply["type"] in ("error", "exit"):
                return reply

    def load(self, timeout: float = 600.0, **spec: Any) -> dict[str, Any]:
        self.send("load", **spec)
        return self.wait_for("loaded", timeout=timeout)

    def generate(self, messages: list[dict[str, str]], settings: GenerationSettings) -> int:
        self.next_id += 1
        self.send("generate", id=self.next_id, messages=messages, **settings.request())
        return self.next_id

    def stop(self) -> None:
        self.send("stop")

    def kill(self) -> None:
        """Ends the worker at once (it ignores "stop" while it reads a long prompt)."""
        try:
            self.proc.kill()
        except OSError:
            pass

    def close(self) -> None:
        self.send("quit")
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
