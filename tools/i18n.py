"""The message catalog's upkeep with Babel (``make i18n``): extract every string marked with
``_``, ``N_`` or ``ngettext`` from the package into ``ftui/locale/ftui.pot``, update the
Chinese catalog ``ftui/locale/zh_CN/LC_MESSAGES/ftui.po`` from it (new strings come in
untranslated, strings gone from the code leave), merge any ``i18n-parts/*.po`` (translations
written apart, e.g. by several people at once) into it, and compile ``ftui.mo``.

    python tools/i18n.py            extract, update, merge the parts, compile
    python tools/i18n.py --check    exit 1 listing what has no translation (the tests do the same)

A development tool: Babel is in the ``test`` extra, never needed to run ftui (the stdlib's
gettext reads the compiled ``ftui.mo``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from babel.messages.catalog import Catalog
from babel.messages.extract import extract_from_dir
from babel.messages.mofile import write_mo
from babel.messages.pofile import read_po, write_po

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "ftui"
POT = PACKAGE / "locale" / "ftui.pot"
PO = PACKAGE / "locale" / "zh_CN" / "LC_MESSAGES" / "ftui.po"
MO = PO.with_suffix(".mo")
PARTS = ROOT / "i18n-parts"
KEYWORDS = {"_": None, "N_": None, "ngettext": (1, 2)}
METHOD_MAP = [("**.py", "python")]


def extract() -> Catalog:
    """Every marked string of the package (the runner's too: its hints and errors reach users)."""
    catalog = Catalog(project="ftui", domain="ftui")
    for filename, lineno, message, comments, context in extract_from_dir(
            str(PACKAGE), METHOD_MAP, keywords=KEYWORDS, comment_tags=("Translators:",), strip_comment_tags=True):
        catalog.add(message, None, [(str(Path("ftui") / filename), lineno)], auto_comments=comments, context=context)
    return catalog


def read(path: Path, locale: str = "zh_CN") -> Catalog:
    with open(path, "rb") as fh:
        return read_po(fh, locale=locale)


def untranslated(template: Catalog, catalog: Catalog) -> list[str]:
    """The extracted strings the catalog has no (non-fuzzy, complete) translation for."""
    missing = []
    for message in template:
        if not message.id:
            continue
        found = catalog.get(message.id, context=message.context)
        strings = found.string if found is not None else None
        complete = all(strings) if isinstance(strings, (tuple, list)) else bool(strings)
        if found is None or found.fuzzy or not complete:
            missing.append(message.id if isinstance(message.id, str) else message.id[0])
    return missing


def update() -> Catalog:
    template = extract()
    POT.parent.mkdir(parents=True, exist_ok=True)
    with open(POT, "wb") as fh:
        write_po(fh, template, width=100, sort_by_file=True)
    catalog = read(PO) if PO.is_file() else Catalog(locale="zh_CN", project="ftui", domain="ftui")
    for part in sorted(PARTS.glob("*.po")) if PARTS.is_dir() else []:
        for message in read(part):
            if message.id and message.string:
                catalog.delete(message.id, context=message.context)  # a part's translation wins (it is the newer
                catalog[message.id] = message  # work); assigning alone would keep the catalog's old string
    catalog.update(template, no_fuzzy_matching=True)
    catalog.obsolete.clear()  # strings the code no longer has
    PO.parent.mkdir(parents=True, exist_ok=True)
    with open(PO, "wb") as fh:
        write_po(fh, catalog, width=100, sort_by_file=True, omit_header=False)
    with open(MO, "wb") as fh:
        write_mo(fh, catalog)
    return catalog


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="list the strings without a translation; exit 1 if any")
    args = parser.parse_args(argv)
    if args.check:
        missing = untranslated(extract(), read(PO))
    else:
        catalog = update()
        missing = untranslated(extract(), catalog)
        print(f"{PO.relative_to(ROOT)}: {len(catalog)} messages; compiled {MO.relative_to(ROOT)}")
    for message in missing:
        print(f"untranslated: {message!r}", file=sys.stderr)
    return 1 if missing and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
