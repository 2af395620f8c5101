"""What ``--force`` may replace at an export's out dir, and the export's temporary directories.

ftui never deletes what it did not write. Every export ftui writes ends with a marker,
``.ftui-export.json``, listing its files and their sizes; ``--force`` replaces only

- an empty directory, or
- an earlier ftui export: the marker is there and every other entry is a plain file the
  marker lists, at the size it lists (a file the user added or changed since is theirs).

Anything else is refused, naming a few of the entries found. A symbolic link is never
followed to delete: ``--out`` that is a link is refused (the job renames directories, and a
link would be replaced, or its target emptied); the old export is moved aside by a rename,
which never follows links, and checked once more after the move, right before it is removed.

The new export is written to a temporary directory beside ``out`` (``ftui.safety.owned_dirs``: an
unpredictable name, mode 0700, marked and locked by the job) and renamed into place only when
complete; an earlier one is moved aside into another such directory first and removed once the
new one is in place. What a killed job leaves (``.OUT.ftui-export-*``, ``.OUT.ftui-replaced-*``)
is removed by the next export into the same parent directory and by ``ftui runs``, except an
earlier export left aside with nothing at ``out`` (a job killed between its two renames): that
one is put back at ``out`` (``restore_asides``).

What to run with a finished export (``usage_commands``) is written here too: each path in the
commands is shell-quoted (an out dir's name is the user's, and may hold anything). Both the
export job (its ``export`` event) and the app (a job from before the event carried them) read it.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import stat
from pathlib import Path
from typing import Any

from ftui.i18n import _
from ftui.safety.owned_dirs import MARKER as TEMP_MARKER, inspect, open_marker, release, sweep, sweep_line

EXPORT_MARKER = ".ftui-export.json"
MARKER_MAX = 1 << 20
SHOWN_ENTRIES = 5
# The temporary directories' names: .OUT.ftui-export-RANDOM (the export being written) and
# .OUT.ftui-replaced-RANDOM (the earlier export, moved aside until the new one is in place)
TEMP_KIND, ASIDE_KIND = "export", "export-replaced"
LEFTOVER_NAME = re.compile(r"\..+\.ftui-(export|replaced)-[A-Za-z0-9_]+")
ASIDE_NAME = re.compile(r"\..+\.ftui-replaced-[A-Za-z0-9_]+")


def temp_prefix(out: Path) -> str:
    return f".{out.name}.ftui-export-"


def aside_prefix(out: Path) -> str:
    return f".{out.name}.ftui-replaced-"


def export_files(dest: Path) -> dict[str, int]:
    """The plain files an export directory holds, by name, with their sizes (ftui's markers
    left out)."""
    files = {}
    for entry in os.scandir(dest):
        if entry.name in (EXPORT_MARKER, TEMP_MARKER):
            continue
        st = entry.stat(follow_symlinks=False)
        if stat.S_ISREG(st.st_mode):
            files[entry.name] = st.st_size
    return files


def write_marker(dest: Path, **info: Any) -> None:
    """The last file an export writes: what it wrote (so a later ``--force`` knows what it
    may replace) and where from."""
    record = {"ftui_export": 1, **info, "files": export_files(dest)}
    fd = os.open(dest / EXPORT_MARKER, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(record, fh, indent=1)
        fh.write("\n")


def _read_marker(target: Path) -> dict[str, int] | None:
    """The files the marker lists, or None when there is no readable marker ftui wrote."""
    try:
        fd, record = open_marker(target / EXPORT_MARKER, MARKER_MAX)
    except (OSError, ValueError):
        return None
    os.close(fd)
    files = record.get("files") if isinstance(record, dict) and record.get("ftui_export") == 1 else None
    if not isinstance(files, dict) or not all(isinstance(k, str) and isinstance(v, int) for k, v in files.items()):
        return None
    return files


def _shown(names: list[str]) -> str:
    names = sorted(names)
    text = ", ".join(names[:SHOWN_ENTRIES])
    if len(names) > SHOWN_ENTRIES:
        text = _("{names} and {count} more").format(names=text, count=len(names) - SHOWN_ENTRIES)
    return text


def replace_problem(target: Path, shown_as: Path | None = None) -> str | None:
    """Why ``--force`` must not replace ``target`` (a path whose parents are already resolved),
    or None: it does not exist, is empty, or is an earlier ftui export and nothing else (the
    module docstring's rule). Reads with lstat: no link is followed."""
    shown = shown_as or target
    try:
        st = os.lstat(target)
    except FileNotFoundError:
        return None
    except OSError as err:
        return _("{path} cannot be read: {reason}").format(path=shown, reason=err.strerror or err)
    if stat.S_ISLNK(st.st_mode):
        return link_problem(shown, target)
    if not stat.S_ISDIR(st.st_mode):
        return _("{path} exists and is not a directory; choose another --out").format(path=shown)
    try:
        entries = {e.name: e.stat(follow_symlinks=False) for e in os.scandir(target)}
    except OSError as err:
        return _("{path} cannot be read: {reason}").format(path=shown, reason=err.strerror or err)
    entries.pop(TEMP_MARKER, None)  # a job killed between its last two steps leaves its own marker
    if not entries:
        return None
    listed = _read_marker(target)
    if listed is None:
        return _("--force replaces only an earlier ftui export or an empty directory, and {path} holds {entries}, "
                 "which ftui did not write (no {marker}); choose another --out, or move those away yourself").format(
            path=shown, entries=_shown(list(entries)), marker=EXPORT_MARKER)
    foreign = [name for name, est in entries.items() if name != EXPORT_MARKER
               and (not stat.S_ISREG(est.st_mode) or listed.get(name) != est.st_size)]
    if foreign:
        return _("--force replaces only what an earlier ftui export wrote, and {path} also holds {entries}, "
                 "which that export did not write (or which changed since); choose another --out, or move those away "
                 "yourself").format(path=shown, entries=_shown(foreign))
    return None


def link_problem(shown: Path, target: Path) -> str:
    try:
        points_to = os.readlink(target)
    except OSError:
        points_to = "?"
    return _("{path} is a symbolic link (to {target}); ftui never follows a link to replace or delete what it points to: "
             "give a directory itself as --out").format(path=shown, target=points_to)


def restore_asides(parent: Path) -> list[Path]:
    """Puts back the earlier exports that a ``--force`` export killed between its two renames
    (the old one moved aside, the new one not yet in its place) left aside: the out dir the
    marker names is missing, so the earlier export goes back there instead of being swept
    away with its job's leftovers. Returns the out dirs restored."""
    restored = []
    try:
        names = [e.name for e in os.scandir(parent) if ASIDE_NAME.fullmatch(e.name)]
    except OSError:
        return restored
    for name in sorted(names):
        found = inspect(parent / name, (ASIDE_KIND,))
        if found is None:
            continue
        try:
            named = (found.info or {}).get("out")
            out = parent / Path(named).name if isinstance(named, str) and Path(named).name else None
            old = found.path / "old"
            if (out is not None and name.startswith(aside_prefix(out)) and not os.path.lexists(out)
                    and stat.S_ISDIR(os.lstat(old).st_mode)):
                os.rename(old, out)  # rename(2): never follows a link; fails rather than replace what appeared
                restored.append(out)
        except OSError:
            pass
        finally:
            release(found.fd)
    return restored


def sweep_leftovers(parent: Path) -> str | None:
    """Removes what killed export jobs left in ``parent`` (their temporary and moved-aside
    directories, recognised by name and marker, whose job is gone), after putting back an
    earlier export that one left aside with nothing in its place (``restore_asides``); one
    line saying so, or None."""
    restored = restore_asides(parent)
    removed, failed = sweep(parent, LEFTOVER_NAME, (TEMP_KIND, ASIDE_KIND))
    line = sweep_line(removed, failed, "export")
    if restored:
        back = _("put back the earlier export an interrupted ftui export had moved aside: {paths}").format(
            paths=", ".join(str(p) for p in restored))
        line = "; ".join(filter(None, [back, line]))
    return line


def usage_commands(out: Path, gguf_file: str | None = None) -> list[str]:
    """What to run with the result (the end of the CLI's output and of the screen)."""
    name = re.sub(r"[^a-z0-9._-]+", "-", out.name.lower()).strip("-") or "ftui-export"
    cmds = [f"ftui chat --model {shlex.quote(str(out))}"]
    cmds.append(f"ollama create {name} -f {shlex.quote(str(out / 'Modelfile'))}")
    if gguf_file:
        cmds.append(f"llama-cli -m {shlex.quote(str(out / gguf_file))} -cnv")
    return cmds
