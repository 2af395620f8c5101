"""What a run trained on: each dataset file's path, size and sha256, recorded at the start.

A resume compares the run's fingerprint (``data_fingerprint.json`` in the run directory)
with the files it is about to read, so records replaced or cut between a stop and a resume
are named instead of silently changing the loss curve (ftui.rundir.resume_checks). Torch-free and
streamed: hashing reads each file once in 1 MiB blocks (hashlib.file_digest), so a large
dataset costs one read, not its size in memory. The app computes it in the worker that starts
a run (prepare_run), the CLI before it starts or resumes one.

A hub dataset is recorded by name, split and subset; its revision is not known before the
runner loads it (no config key pins one), so a hub dataset's records cannot be compared.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from ftui.rundir.paths import DATA_FINGERPRINT_FILE

FORMAT = 1
READ_MAX = 16 << 20  # a fingerprint is a few hundred bytes per dataset file


def file_digest(path: Path) -> tuple[int, str]:
    """(size in bytes, sha256 hex) of a file, read in blocks (stdlib's file_digest)."""
    with open(path, "rb") as fh:
        digest = hashlib.file_digest(fh, "sha256")
        return fh.tell(), digest.hexdigest()


def _folder_digest(path: Path) -> tuple[int, str]:
    """A dataset folder (the runner reads its data files, in name order) as one size and hash:
    each file's name and bytes in that order, so renaming, adding or changing a file shows."""
    from ftui.data.dataset_files import DATA_SUFFIXES

    total, digest = 0, hashlib.sha256()
    for f in sorted(p for p in path.iterdir() if p.suffix in DATA_SUFFIXES and p.is_file()):
        size, sha = file_digest(f)
        total += size
        digest.update(f"{f.name}\0{size}\0{sha}\n".encode())
    return total, digest.hexdigest()


def _entry(role: str, spec: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {"role": role, "name": spec.name}
    if not spec.file_name:  # a hub dataset: what is known of it before the runner loads it
        entry.update(hub=spec.hf_hub_url or spec.name, split=spec.split, subset=spec.subset, revision=None)
        return entry
    path = Path(spec.file_name).expanduser()
    entry["path"] = os.path.abspath(path)
    try:
        entry["size"], entry["sha256"] = _folder_digest(path) if path.is_dir() else file_digest(path)
    except OSError as err:
        entry["error"] = err.strerror or str(err)
    return entry


def compute(cfg: Any) -> dict[str, Any]:
    """The fingerprint of ``cfg``'s training and eval datasets, as they resolve now (a name
    that no longer resolves is recorded with the reason: the run itself says more)."""
    from ftui.data.records import DataFormatError
    from ftui.data.registry import resolve_datasets

    entries: list[dict[str, Any]] = []
    for role, names in (("dataset", cfg.dataset), ("eval_dataset", cfg.eval_dataset)):
        if not names:
            continue
        try:
            specs = resolve_datasets(names, cfg.dataset_dir)
        except (DataFormatError, OSError, ValueError) as err:
            entries.append({"role": role, "name": names, "error": str(err)[:300]})
            continue
        entries += [_entry(role, spec) for spec in specs]
    return {"format": FORMAT, "datasets": entries}


def record(run_dir: Path, fingerprint: dict[str, Any]) -> None:
    """Writes the run's fingerprint whole or not at all (ftui.safety.files: a new file renamed
    over it, never written through a link)."""
    from ftui.safety.files import write_text

    write_text(Path(run_dir) / DATA_FINGERPRINT_FILE, json.dumps(fingerprint, indent=1))


def read(run_dir: Path) -> dict[str, Any] | None:
    """The run's recorded fingerprint; None for a run started before ftui recorded one (or
    whose file is unreadable or not ftui's: it cannot be compared either)."""
    from ftui.safety.bounded_input import load_json
    from ftui.rundir.run_files import read_at, UnreadableFile

    try:  # a run directory is untrusted: bounded, never blocking (read_at), nesting refused (load_json)
        data = load_json(read_at(Path(run_dir) / DATA_FINGERPRINT_FILE, 0, READ_MAX) or b"")
    except (OSError, ValueError, UnreadableFile):
        return None
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("datasets"), list):
        return None
    return data
