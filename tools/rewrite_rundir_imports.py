"""One-off, for merging issue 40's branches: rewrites imports of the modules the `jobs` branch
split or emptied (ftui.rundir.runs, the old ftui.rundir.events, ftui.cli.follow's formatters and
ETA window, ftui.tui.state's extend_finite) and of the names it moved so that the runner imports
neither ftui.jobs nor the planner (MOVED, RENAMED) to the modules that now define each name.
``import ftui.x as y`` and patch strings ("ftui.rundir.runs.NAME") are not rewritten: grep them.

    python tools/rewrite_rundir_imports.py FILE...     (rewrites in place, prints what it could not map)

Delete this file once every branch is merged.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NEW_MODULES = ["paths", "run_files", "events", "event_writer", "event_reader", "launch_record", "liveness", "summary",
               "fold", "follower", "index", "listing", "delete", "resolve", "checkpoints", "log_tail", "formats"]
OLD = {"ftui.rundir.runs", "ftui.rundir.events", "ftui.cli.follow", "ftui.tui.state"}
# Names moved out of modules that stay, so that the runner imports neither ftui.jobs nor the planner
MOVED = {
    "ftui.jobs.launch": {"RunBusy": "ftui.rundir.lock", "lock_run_dir": "ftui.rundir.lock"},
    "ftui.jobs.spawn": {"STORE_ENV": "ftui.rundir.rank_env", "THREADS_DEFAULTED_ENV": "ftui.rundir.rank_env"},
    "ftui.jobs.export": {"usage_commands": "ftui.safety.export_out", "fmt_bytes": "ftui.rundir.formats"},
    "ftui.plan.planner": {"LIGER_CHUNK_FACTOR": "ftui.plan.loss_chunks", "LOSS_CHUNK_ELEMENTS": "ftui.plan.loss_chunks"},
    "ftui.tui.widgets": {"fmt_bytes": "ftui.rundir.formats", "fmt_num": "ftui.rundir.formats"},
}
RENAMED = {"ftui.jobs.export_out": "ftui.safety.export_out"}  # the whole module moved
# names the old modules held that no new module defines at top level (only the first may be imported)
GONE = {"JOB_ENGINES"}


def defined_names() -> dict[str, str]:
    where: dict[str, str] = {}
    for mod in NEW_MODULES:
        tree = ast.parse((ROOT / "ftui" / "rundir" / f"{mod}.py").read_text())
        for node in tree.body:
            names = []
            if isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)):
                names = [node.name]
            elif isinstance(node, ast.Assign):
                names = [t.id for t in node.targets if isinstance(t, ast.Name)]
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                names = [node.target.id]
            for n in names:
                where.setdefault(n, f"ftui.rundir.{mod}")  # paths first: its names win
    return where


def own_names(module: str) -> set[str]:
    """Names a module that still exists defines itself (those stay imported from it)."""
    path = ROOT / (module.replace(".", "/") + ".py")
    if not path.exists():
        return set()
    tree = ast.parse(path.read_text())
    out = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)):
            out.add(node.name)
        elif isinstance(node, ast.Assign):
            out |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out.add(node.target.id)
    return out


def rewrite(path: Path, where: dict[str, str]) -> list[str]:
    text = path.read_text()
    lines = text.split("\n")
    tree = ast.parse(text)
    problems = []
    edits = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom) or node.module not in OLD | set(MOVED) | set(RENAMED):
            continue
        keep = own_names(node.module) if node.module in OLD else set()
        groups: dict[str, list[str]] = {}
        for alias in node.names:
            name = alias.name
            if node.module in RENAMED:
                target = RENAMED[node.module]
            elif node.module in MOVED:
                target = MOVED[node.module].get(name, node.module)
            else:
                target = node.module if name in keep else where.get(name)
            if target is None:
                problems.append(f"{path}:{node.lineno}: {name} from {node.module}: no module defines it now")
                continue
            groups.setdefault(target, []).append(name if alias.asname is None else f"{name} as {alias.asname}")
        if list(groups) == [node.module]:
            continue  # nothing of it moved: the line stays as written
        indent = lines[node.lineno - 1][: len(lines[node.lineno - 1]) - len(lines[node.lineno - 1].lstrip())]
        new = [f"{indent}from {mod} import {', '.join(sorted(names, key=str.lower))}" for mod, names in sorted(groups.items())]
        edits.append((node.lineno, node.end_lineno, new))
    for start, end, new in sorted(edits, reverse=True):
        lines[start - 1:end] = new
    if edits:
        path.write_text("\n".join(lines))
    return problems


def main(argv: list[str]) -> int:
    where = defined_names()
    problems = []
    for arg in argv:
        problems += rewrite(Path(arg), where)
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
