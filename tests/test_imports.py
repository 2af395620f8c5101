"""The architecture's rule (docs/architecture.md): only ``ftui.runner`` loads torch,
transformers, peft, deepspeed or datasets; every other module of ftui imports without them."""

import subprocess
import sys


def test_every_module_outside_the_runner_imports_without_torch():
    code = (
        "import importlib, pkgutil, sys\n"
        "names, todo = [], ['ftui']\n"
        "while todo:\n"  # walk_packages would import ftui.runner's packages to look inside them
        "    mod = importlib.import_module(todo.pop())\n"
        "    names.append(mod.__name__)\n"
        "    for m in pkgutil.iter_modules(getattr(mod, '__path__', []), mod.__name__ + '.'):\n"
        "        if m.name != 'ftui.runner':\n"
        "            todo.append(m.name)\n"
        "heavy = [m for m in ('torch', 'transformers', 'peft', 'deepspeed', 'datasets') if m in sys.modules]\n"
        "print(len(names), 'HEAVY', heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert int(out[0]) > 20 and out[1:] == ["HEAVY", "[]"], out  # the walk found the app's modules


def test_import_contract_holds():
    """The same rule as import-linter contracts over whole packages (pyproject.toml), which
    also see imports inside functions that the check above never executes."""
    import shutil

    exe = shutil.which("lint-imports") or str(__import__("pathlib").Path(sys.executable).with_name("lint-imports"))
    proc = subprocess.run([exe], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_first_frame_of_ftui_builds_no_pydantic_model():
    """`ftui` paints the launch form before it imports ftui.config.schema (building its pydantic
    model took a fifth of the first frame's time): neither ftui.cli.main nor the form's first frame
    imports it. What the first frame imports, not how long it takes: no wall-clock here."""
    probe = (
        "import sys\n"
        "import ftui.cli.main\n"
        "from ftui.tui.app import FtuiApp\n"
        "from ftui.tui.screens.launch import LaunchScreen\n"
        "seen = []\n"
        "class Probe(FtuiApp):\n"
        "    def _display(self, screen, renderable):\n"
        "        super()._display(screen, renderable)\n"
        "        if renderable is not None and isinstance(screen, LaunchScreen) and not seen:\n"
        "            seen.append(sorted(m for m in ('ftui.config.schema', 'pydantic') if m in sys.modules))\n"
        "            self.set_timer(0.5, self.exit)\n"  # (exiting at once raced the form's completion)
        "Probe('runs', offer_live=False).run(headless=True, size=(80, 24))\n"
        "print('LOADED', seen[0])\n"
    )
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=tmp, timeout=120)
    assert "LOADED []" in out.stdout, out.stdout[-2000:] + out.stderr[-2000:]


def test_the_form_builds_ftui_configs_model_off_the_ui_thread():
    """Importing ftui.config.schema (its pydantic model) took a fifth of a second or more; the form
    imports it in its validation worker, never on the UI thread, until the form is ready."""
    probe = (
        "import sys, threading\n"
        "importers = []\n"
        "def audit(event, args):\n"
        "    if event == 'import' and args[0] == 'ftui.config.schema':\n"
        "        importers.append(threading.current_thread() is threading.main_thread())\n"
        "sys.addaudithook(audit)\n"
        "from ftui.tui.app import FtuiApp\n"
        "class Probe(FtuiApp):\n"
        "    def on_mount(self):\n"
        "        super().on_mount()\n"
        "        self.set_interval(0.2, self.check)\n"
        "    def check(self):\n"
        "        screen = self.screen\n"
        "        if getattr(screen, 'validated', False):\n"
        "            self.exit()\n"
        "Probe('runs', offer_live=False).run(headless=True, size=(100, 40))\n"
        "print('IMPORTED ON THE UI THREAD', importers[:1])\n"
    )
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=tmp, timeout=300)
    assert "IMPORTED ON THE UI THREAD [False]" in out.stdout, out.stdout[-2000:] + out.stderr[-2000:]
