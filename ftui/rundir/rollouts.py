"""The rollouts file of a run that learns from rewards (grpo): one JSON line per scored
completion, bounded in size (past ``cap_bytes`` the file becomes ``rollouts.old.jsonl`` and a
new one starts). Torch-free.

(A minimal version written by grpo-core; the rollouts-ui helper owns this module.)"""

from __future__ import annotations

import json
from pathlib import Path

ROLLOUTS_FILE = "rollouts.jsonl"
OLDER_FILE = "rollouts.old.jsonl"


class RolloutWriter:
    def __init__(self, run_dir: Path, cap_bytes: int = 32 << 20):
        self.path = Path(run_dir) / ROLLOUTS_FILE
        self.older = Path(run_dir) / OLDER_FILE
        self.cap = cap_bytes
        self.fh = open(self.path, "a", encoding="utf-8")

    def write(self, rows: list[dict]) -> None:
        for row in rows:
            self.fh.write(json.dumps(row, ensure_ascii=False) + "\n")
        self.fh.flush()
        if self.fh.tell() > self.cap:
            self.fh.close()
            self.path.replace(self.older)
            self.fh = open(self.path, "a", encoding="utf-8")

    def close(self) -> None:
        self.fh.close()


def read_rollouts(run_dir: Path) -> list[dict]:
    rows: list[dict] = []
    for path in (Path(run_dir) / OLDER_FILE, Path(run_dir) / ROLLOUTS_FILE):
        if path.is_file():
            for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
                try:
                    row = json.loads(line)
                except ValueError:
                    continue
                if isinstance(row, dict):
                    rows.append(row)
    return rows
