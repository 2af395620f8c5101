"""DESIGN.md's rule: the dashboard side never loads torch, transformers, peft or deepspeed."""

import subprocess
import sys

LIGHT = ["ftui.cli", "ftui.events", "ftui.runs", "ftui.gpu", "ftui.follow", "ftui.presets", "ftui.presets.config",
         "ftui.presets.families", "ftui.presets.templates", "ftui.runner.launch", "ftui.runner.supervise", "ftui.runner.records", "ftui.tui", "ftui.plan"]


def test_light_modules_do_not_load_torch():
    code = (
        "import importlib, pkgutil, sys\n"
        f"for name in {LIGHT!r}:\n"
        "    mod = importlib.import_module(name)\n"
        "    for info in pkgutil.walk_packages(getattr(mod, '__path__', []), name + '.'):\n"
        "        importlib.import_module(info.name)\n"
        "heavy = [m for m in ('torch', 'transformers', 'peft', 'deepspeed', 'datasets') if m in sys.modules]\n"
        "print('HEAVY', heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "HEAVY []"


def test_import_contract_holds():
    """The same rule as an import-linter contract (pyproject.toml), which also sees imports
    inside functions that the check above never executes."""
    import shutil

    exe = shutil.which("lint-imports") or str(__import__("pathlib").Path(sys.executable).with_name("lint-imports"))
    proc = subprocess.run([exe], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
