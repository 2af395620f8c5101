"""The interface in English and Chinese (ftui.i18n, the gettext catalog made with Babel).

Every string marked for translation has a Chinese translation (extraction over the package
compared with the catalog, as ``python tools/i18n.py --check`` does), with the same
placeholders; the compiled catalog is in step with its source; and the places that show text
to a user (widgets, notifications, the CLI's output and help, user errors) are given marked
strings, never a bare English literal or an f-string (which extraction cannot see).
"""

from __future__ import annotations

import ast
import gettext
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

import i18n as catalog_tool  # noqa: E402  (tools/i18n.py)

PLACEHOLDER = re.compile(r"\{[^{}]*\}|%\([a-z_]+\)[sdr]|%[sdr]")


@pytest.fixture(scope="module")
def extracted():
    return catalog_tool.extract()


@pytest.fixture(scope="module")
def zh():
    return catalog_tool.read(catalog_tool.PO)


def test_every_marked_string_has_a_chinese_translation(extracted, zh):
    missing = catalog_tool.untranslated(extracted, zh)
    assert not missing, f"{len(missing)} strings without a Chinese translation (run `make i18n`, translate them in " \
                        f"{catalog_tool.PO.relative_to(ROOT)}): {missing[:15]}"


def test_translations_keep_the_placeholders(zh):
    """A translation may reorder ``{name}`` placeholders, never drop or rename one (format()
    would raise KeyError in Chinese only)."""
    wrong = []
    for message in zh:
        if not message.id or not message.string:
            continue
        ids = message.id if isinstance(message.id, (tuple, list)) else (message.id,)
        strings = message.string if isinstance(message.string, (tuple, list)) else (message.string,)
        want = sorted(PLACEHOLDER.findall(ids[0]))
        for text in strings:
            if sorted(PLACEHOLDER.findall(text)) != want:
                wrong.append((ids[0], text))
    assert not wrong, wrong[:10]


def test_compiled_catalog_is_in_step_with_its_source(zh):
    with open(catalog_tool.MO, "rb") as fh:
        compiled = gettext.GNUTranslations(fh)
    stale = [m.id for m in zh if m.id and isinstance(m.id, str) and m.string and not m.fuzzy and compiled.gettext(m.id) != m.string]
    assert not stale, f"ftui.mo is older than ftui.po (run `make i18n`): {stale[:10]}"


def test_language_comes_from_ftui_lang_then_the_locale():
    from ftui.i18n import detect_language

    assert detect_language({}) == "en"
    assert detect_language({"LANG": "zh_CN.UTF-8"}) == "zh"
    assert detect_language({"LANG": "zh_TW.UTF-8", "FTUI_LANG": "en"}) == "en"
    assert detect_language({"FTUI_LANG": "zh-Hans"}) == "zh"
    assert detect_language({"LC_ALL": "C", "LANG": "zh_CN.UTF-8"}) == "en"  # LC_ALL first, as gettext reads them
    assert detect_language({"FTUI_LANG": "klingon", "LANG": "zh_CN"}) == "zh"  # unknown FTUI_LANG: the locale decides


def test_switching_translates_without_a_restart(monkeypatch):
    from ftui import i18n

    monkeypatch.setenv("FTUI_LANG", "en")
    try:
        i18n.set_language("zh")
        assert i18n.current_language() == "zh"
        zh_text = i18n._("Quit")
        assert zh_text != "Quit" and zh_text.strip()
        import os

        assert os.environ["FTUI_LANG"] == "zh"  # the jobs started from now on speak it too
        i18n.set_language("en")
        assert i18n._("Quit") == "Quit"
    finally:
        i18n.set_language("en", export=False)


# --- Where text reaches a user: those arguments must be marked strings

MARKERS = {"_", "N_", "ngettext"}
# call name -> which arguments are shown (positional indexes, keyword names)
SINKS: dict[str, tuple[tuple[int, ...], tuple[str, ...]]] = {
    "notify": ((0,), ("message", "title")),
    "Label": ((0,), ()),
    "Static": ((0,), ()),
    "Button": ((0,), ("label",)),
    "Checkbox": ((0,), ("label",)),
    "RadioButton": ((0,), ("label",)),
    "Switch": ((), ()),
    "TabPane": ((0,), ()),
    "Binding": ((2,), ("description",)),
    "Input": ((), ("placeholder",)),
    "Select": ((), ("prompt",)),
    "SystemCommand": ((0, 1), ("title", "help")),
    "add_parser": ((), ("help", "description")),
    "add_argument": ((), ("help",)),
    "print": ((0,), ()),
    "update": ((0,), ()),  # Static.update
    "Text": ((0,), ()),
    "Field": ((), ("description",)),  # RunConfig's fields: the form's help
}
USER_ERRORS = {"ConfigError", "ExportError", "JobError", "WeightsError", "ChatError", "GGUFError", "CheckpointError",
               "RunDeleteError", "RunBusy", "RunsRootError", "UnknownModel", "DatasetError", "DataError", "UserError"}
LETTERS = re.compile(r"[A-Za-z]{2}")


def _shown_literal(node: ast.AST) -> bool:
    """An English literal the user would read as is: a string constant with words, an
    f-string or a concatenation with one (a marked string, a name, a call: fine)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return bool(LETTERS.search(re.sub(r"\[/?[a-z #0-9]*\]", "", node.value)))  # Rich markup tags are not words
    if isinstance(node, ast.JoinedStr):
        return any(_shown_literal(v) for v in node.values if isinstance(v, ast.Constant))
    if isinstance(node, ast.BinOp):
        return _shown_literal(node.left) or _shown_literal(node.right)
    return False


def _name(func: ast.AST) -> str | None:
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None


def bare_strings(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):  # _("...") inside an f-string: Babel's extraction never sees it
            for call in (n for v in node.values if isinstance(v, ast.FormattedValue) for n in ast.walk(v.value)):
                if isinstance(call, ast.Call) and _name(call.func) in MARKERS and call.args and isinstance(call.args[0], ast.Constant):
                    found.append(f"{path.relative_to(ROOT)}:{call.lineno}: {ast.unparse(call)[:80]} inside an f-string")
            continue
        if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and _name(node.exc.func) in USER_ERRORS:
            args = list(node.exc.args[:1])
        elif isinstance(node, ast.Call) and _name(node.func) in SINKS:
            positions, keywords = SINKS[_name(node.func)]
            args = [node.args[i] for i in positions if i < len(node.args)]
            args += [k.value for k in node.keywords if k.arg in keywords]
        else:
            continue
        for arg in args:
            if _shown_literal(arg):
                found.append(f"{path.relative_to(ROOT)}:{arg.lineno}: {ast.unparse(arg)[:80]}")
    return found


def test_text_shown_to_users_is_marked_for_translation():
    """Widgets' labels, notifications, the CLI's output, help and user errors: every English
    literal goes through _() (or N_() where defined at import), so it is in the catalog."""
    found = [line for path in sorted((ROOT / "ftui").rglob("*.py")) for line in bare_strings(path)]
    assert not found, f"{len(found)} strings shown to users without _(): " + "\n".join(found[:40])
