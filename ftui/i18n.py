"""The interface's language: English (the source strings) or Simplified Chinese, through one
gettext catalog (``ftui/locale/zh_CN/LC_MESSAGES/ftui.po``, compiled to ``ftui.mo`` with
Babel: ``make i18n``).

Every string a user reads is written in English in the code and passed through :func:`_`
where it is shown (``_("Start")``, ``_("{n} steps").format(n=n)``: placeholders by name, so a
translation may reorder them; never an f-string inside ``_``, which extraction cannot see).
Strings defined once at import (binding descriptions, tables of help texts, pydantic field
descriptions) are marked with :func:`N_` for extraction and translated where they are shown,
so switching the language inside the app takes effect without a restart. Field and key names
from LLaMA-Factory's YAML (``cutoff_len``, ``lora_rank``) stay as they are in both languages.

The language: ``FTUI_LANG`` (``en``, ``zh``; ``zh_CN``, ``zh-Hans`` ... count as zh), else the
locale (``LC_ALL``, ``LC_MESSAGES``, ``LANG`` starting with ``zh``), else English. Child
processes (training, chat, export jobs) inherit ``FTUI_LANG``, which :func:`set_language`
keeps in step. Torch-free: the app, the CLI and the runner all use it.
"""

from __future__ import annotations

import gettext
import os
from pathlib import Path
from typing import Mapping

LOCALE_DIR = Path(__file__).resolve().parent / "locale"
DOMAIN = "ftui"
LANGUAGES = {"en": "English", "zh": "中文"}
CATALOG_LOCALE = {"zh": "zh_CN"}  # the language -> the catalog's locale directory

_state: dict[str, object] = {"lang": "en", "translation": gettext.NullTranslations()}


def normalize(value: str | None) -> str | None:
    """``zh``, ``zh_CN.UTF-8``, ``zh-Hans`` -> zh; ``en...``, ``C``, ``POSIX`` -> en; else None."""
    if not value:
        return None
    v = value.strip().lower().replace("-", "_")
    if v.startswith("zh"):
        return "zh"
    if v.startswith("en") or v in ("c", "posix") or v.startswith("c."):
        return "en"
    return None


def detect_language(env: Mapping[str, str] | None = None) -> str:
    """FTUI_LANG, else the locale (LC_ALL, LC_MESSAGES, LANG: the first one set decides, as
    gettext reads them), else English."""
    env = os.environ if env is None else env
    chosen = normalize(env.get("FTUI_LANG"))
    if chosen:
        return chosen
    for name in ("LC_ALL", "LC_MESSAGES", "LANG"):
        if env.get(name):
            return "zh" if normalize(env[name]) == "zh" else "en"
    return "en"


def set_language(lang: str, export: bool = True) -> str:
    """Switches every later :func:`_` to ``lang`` (en or zh); ``export``: records it in
    FTUI_LANG for the processes started from now on. Returns the language set."""
    lang = normalize(lang) or "en"
    if lang == "en":
        translation: gettext.NullTranslations = gettext.NullTranslations()
    else:
        translation = gettext.translation(DOMAIN, LOCALE_DIR, languages=[CATALOG_LOCALE[lang]], fallback=True)
    _state["lang"], _state["translation"] = lang, translation
    if export:
        os.environ["FTUI_LANG"] = lang
    return lang


def current_language() -> str:
    return str(_state["lang"])


def _(message: str) -> str:
    """``message`` in the current language (itself in English, or where no translation exists)."""
    return _state["translation"].gettext(message)  # type: ignore[union-attr]


def ngettext(singular: str, plural: str, n: int) -> str:
    return _state["translation"].ngettext(singular, plural, n)  # type: ignore[union-attr]


def N_(message: str) -> str:
    """Marks a string defined at import for extraction; it is translated with :func:`_` where shown."""
    return message


set_language(detect_language(), export=False)  # the environment already says it
