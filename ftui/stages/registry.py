"""The stages ftui trains: every module of the ``ftui.stages`` package whose ``DESCRIPTION`` is
a :class:`StageDescription`, found by listing the package (a new stage is a new module, no
list to edit), in their ``order``.

The package's ``__path__`` is where they are looked for: a plugin (or a test) that appends a
folder to it, and calls :func:`refresh`, adds the stages described there the way the built-in
ones are added (their torch halves then come from a folder appended to
``ftui.runner.stages.__path__``).
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
import threading

from ftui.stages.description import StageDescription, UnknownStage

_found: dict[str, StageDescription] | None = None
_lock = threading.Lock()


def descriptions() -> dict[str, StageDescription]:
    """Every stage's description by name, in order (read once; :func:`refresh` reads again)."""
    global _found
    with _lock:
        if _found is None:
            _found = _discover()
        return _found


def refresh() -> None:
    """Forget what was found: the next call lists the package's path again."""
    global _found
    with _lock:
        _found = None


def _discover() -> dict[str, StageDescription]:
    # The package that holds this module, imported before it by Python's import system: read
    # from sys.modules rather than imported again, which would close a circle (package -> registry).
    package = sys.modules[__name__.rpartition(".")[0]]

    found: dict[str, StageDescription] = {}
    for info in pkgutil.iter_modules(package.__path__, package.__name__ + "."):
        description = getattr(importlib.import_module(info.name), "DESCRIPTION", None)
        if not isinstance(description, StageDescription):
            continue  # the package's own machinery, or options several stages share
        if description.name in found:
            raise ValueError(f"two modules describe stage {description.name!r}: {info.name} and another")
        found[description.name] = description
    return dict(sorted(found.items(), key=lambda item: (item[1].order, item[0])))


def stage_names() -> tuple[str, ...]:
    return tuple(descriptions())


def describe(name: str) -> StageDescription:
    """The description of stage ``name``; UnknownStage if none."""
    try:
        return descriptions()[name]
    except KeyError:
        raise UnknownStage(name) from None


def find(name: object) -> StageDescription | None:
    """The description of ``name`` if it is a stage's, else None (a value read from a file)."""
    return descriptions().get(name) if isinstance(name, str) else None


def stages_reading(kind: str) -> tuple[str, ...]:
    """The stages whose records are of ``kind`` (one of description.DATA_KINDS)."""
    return tuple(name for name, d in descriptions().items() if d.data == kind)


def option_keys() -> set[str]:
    """Every key some stage declares as its own option."""
    return {key for d in descriptions().values() for key in d.option_keys}


def plotted_first() -> tuple[str, ...]:
    """The figures the dashboard plots first, every stage's, in stage order, each once."""
    return tuple(dict.fromkeys(f for d in descriptions().values() for f in d.plotted_first))
