"""Files ftui writes where a user pointed it (``ftui data --dump OUT``, the form's Save, a
chat's /save), created so that nobody else can make the write land elsewhere.

The place may be a shared directory (/tmp, a group's project folder) where another local
user can create names. A fixed temporary name (``OUT.part``) opened with a plain
``open(..., "w")`` follows a symlink that user planted there and overwrites whatever it
points to with the caller's rights. So the content goes to a new file with a random name in
the target's directory, created by ``tempfile.mkstemp`` (``O_CREAT | O_EXCL | O_NOFOLLOW``,
mode 0600 until it is complete: it never opens a file or link that is already there), and is renamed over the
target when complete: ``os.replace`` replaces a name, never writes through a link. A target
that exists and is not a regular file (a symlink, a directory, a device) is refused before
anything is written, and a failed write leaves the target as it was and removes only the
temporary file ftui created.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path
from typing import IO, Iterator

from ftui.i18n import _


class NotARegularFile(OSError):
    """The target exists and is not a regular file (a symlink, a directory, a device):
    ftui does not replace it. An OSError, as every other reason a write can fail."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def refuse_unless_regular(target: Path) -> None:
    """Raises NotARegularFile when ``target`` exists (as any kind of name, a dangling link
    included) and is not a regular file; lstat: a link is judged as the link, not its target."""
    try:
        st = os.lstat(target)
    except FileNotFoundError:
        return
    if not stat.S_ISREG(st.st_mode):
        raise NotARegularFile(_("{path} exists and is not a regular file (a link, a directory or a device); "
                                "give a new file's path").format(path=target))


@contextlib.contextmanager
def replacing(target: str | os.PathLike[str], encoding: str = "utf-8") -> Iterator[IO[str]]:
    """A text file to write ``target``'s new content to; when the block ends without an
    exception it becomes ``target`` (renamed into place, with the mode ``open`` would have given it), else it is removed and
    ``target`` is left as it was. Raises NotARegularFile (an OSError) for a target that is
    not a regular file, OSError for a directory that cannot take the file."""
    path = Path(target)
    refuse_unless_regular(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name[:100]}.", suffix=".ftui-part")
    try:
        with os.fdopen(fd, "w", encoding=encoding) as fh:
            yield fh
            mode = _umask_mode()
            if mode is not None:
                os.fchmod(fh.fileno(), mode)
        refuse_unless_regular(path)  # a link that appeared meanwhile would only be replaced, never written through; said anyway
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)  # ours: made by mkstemp above, under a name nobody else can have taken
        raise


def current_umask() -> int | None:
    """This process's umask, read from /proc/self/status (Linux 4.7+) because os.umask can only
    be read by setting it, which would race with the app's other threads creating files; None
    where it cannot be read."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return None


def _umask_mode() -> int | None:
    """The mode ``open(..., "w")`` would have given (0666 less the umask); None where the umask
    cannot be read (the file then stays 0600)."""
    umask = current_umask()
    return None if umask is None else 0o666 & ~umask


def write_text(target: str | os.PathLike[str], text: str, encoding: str = "utf-8") -> None:
    """``Path(target).write_text(text)`` without following a link at ``target`` or writing
    through a name another user prepared: see :func:`replacing`."""
    with replacing(target, encoding) as fh:
        fh.write(text)
