"""Parsing text that a user, or a stranger who sent them a file, wrote: YAML configs and JSON
datasets, within bounds that keep a hostile file from taking the memory or the stack.

A YAML document of nested anchors ("billion laughs": nine aliases of nine aliases ... of a
list) is a few hundred bytes that PyYAML composes as shared nodes, so loading it is cheap; but
whatever walks the value afterwards (pydantic checking a list field, the ``repr`` in a
message, a ``json.dumps``) writes it out in full: hundreds of millions of items, gigabytes,
minutes. :func:`load_yaml` refuses such a document before anything walks it, and
:func:`short_repr` keeps a value shown in a message short whatever it holds. A JSON or YAML
document nested deeper than Python's recursion limit is refused with one line too
(``json.loads`` and PyYAML's composer recurse once per level and would raise RecursionError,
which nothing above them expects).

Used wherever ftui reads YAML (configs, ``--set`` values, ``ftui --config``, the form's Load,
a run's config.yaml) and dataset JSON (ftui.data.dataset_files).
"""

from __future__ import annotations

import json
import reprlib
import sys
from typing import Any

import yaml

from ftui.i18n import _

# How many values aliases may add to a document beyond those written out in it. A config is
# a few hundred values and needs no aliases at all (LLaMA-Factory's examples use none); a
# hand-written reuse of a block (a list of datasets, a DeepSpeed section) adds tens. 10,000
# leaves room for any such use while a "billion laughs" document (9 levels of 9 aliases:
# 387 million values) is refused after its few hundred bytes are read, long before anything
# writes it out. A document without aliases is never refused for its size here.
ALIAS_EXPANSION_LIMIT = 10_000


class YAMLRefused(yaml.YAMLError):
    """A YAML document ftui will not read (aliases expanding past the bound, a value that
    contains itself, nesting deeper than Python's stack). A YAMLError, so that every reader
    that already says "not valid YAML" in one line says this too."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class JSONTooDeep(ValueError):
    """A JSON document nested deeper than ``json.loads`` can follow. A ValueError, as
    ``json.JSONDecodeError`` is, so that the readers' "not valid JSON" handling takes it."""


def _too_deep() -> str:
    return _("it is nested deeper than ftui reads (about {levels} levels)").format(levels=sys.getrecursionlimit())


class BoundedLoader(yaml.SafeLoader):
    """yaml.SafeLoader that measures each composed document before constructing it: the
    values its aliases would add once written out (:func:`alias_expansion`) must stay within
    ALIAS_EXPANSION_LIMIT, and no alias may refer to a value that contains it."""

    def compose_document(self) -> Any:
        node = super().compose_document()
        alias_expansion(node, ALIAS_EXPANSION_LIMIT)
        return node


def alias_expansion(root: yaml.Node, limit: int) -> int:
    """How many values the aliases under ``root`` add once every alias is written out (the
    expanded node count minus the distinct nodes composed); raises YAMLRefused past ``limit``
    or on a cycle. Each distinct node is visited once (sizes are remembered), so measuring a
    bomb costs what reading it did; iterative, so a deep document does not need Python's stack.
    A subtree's size less the distinct nodes seen so far never exceeds the whole document's
    expansion, so the check on each subtree refuses a bomb at its first level past the bound
    (and keeps every remembered size below ``limit`` + the document's node count)."""
    sizes: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    distinct = 0
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        children = _children(node)
        if children_done:
            on_path.discard(key)
            sizes[key] = 1 + sum(sizes[id(c)] for c in children)
            distinct += 1
            if sizes[key] - distinct > limit:
                raise YAMLRefused(_("its aliases (*name) would expand it to more than {limit} values beyond those written "
                                    "out; write the values out, or reuse fewer anchors").format(limit=f"{limit:,}"))
            continue
        if key in sizes:
            continue
        if key in on_path:
            raise YAMLRefused(_("an alias (*name) refers to a value that contains it; ftui reads no self-containing values"))
        on_path.add(key)
        stack.append((node, True))
        stack.extend((c, False) for c in children if id(c) not in sizes)
    return sizes[id(root)] - distinct


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def load_yaml(text: str | bytes) -> Any:
    """yaml.safe_load within bounds: YAMLRefused (a yaml.YAMLError) for a document whose
    aliases expand past ALIAS_EXPANSION_LIMIT, a self-containing value, one nested deeper
    than Python's stack, or a value too large to make (a number of thousands of digits)."""
    try:
        return yaml.load(text, Loader=BoundedLoader)  # noqa: S506 - a SafeLoader subclass
    except RecursionError:
        raise YAMLRefused(_too_deep()) from None
    except ValueError as err:  # a value PyYAML's constructor cannot make: an integer of more than 4,300 digits
        raise YAMLRefused(_("a value cannot be read: {error}").format(error=str(err).split(";")[0])) from None


def load_json(text: str | bytes) -> Any:
    """json.loads, with JSONTooDeep (a ValueError) instead of RecursionError for a document
    nested deeper than Python's stack."""
    try:
        return json.loads(text)
    except RecursionError:
        raise JSONTooDeep(_too_deep()) from None


# The repr shown in messages: a few items of a list or mapping, two levels, a string's first
# 120 characters, 200 in all. reprlib walks only what it shows, so a value that is huge once written out
# (a shared structure, a long paste) costs no more than a short one.
class _ShortRepr(reprlib.Repr):
    def repr_int(self, x: int, level: int) -> str:
        if x.bit_length() > 4 * self.maxlong:  # repr() of an int past 4,300 digits raises; this one is cut anyway
            return _("<a number of {digits} digits>").format(digits=int(x.bit_length() * 0.30103) + 1)
        return super().repr_int(x, level)


_SHORT = _ShortRepr()
_SHORT.maxlevel, _SHORT.maxlist, _SHORT.maxtuple, _SHORT.maxdict, _SHORT.maxset = 2, 5, 5, 5, 5
_SHORT.maxstring, _SHORT.maxother, _SHORT.maxlong = 120, 120, 60
SHORT_REPR_CHARS = 200


def short_repr(value: Any) -> str:
    """``repr(value)`` capped (reprlib, then at SHORT_REPR_CHARS): what a message may quote of
    a value a user gave."""
    text = _SHORT.repr(value)
    return text if len(text) <= SHORT_REPR_CHARS else text[:SHORT_REPR_CHARS - 3] + "..."


def yaml_reason(err: yaml.YAMLError) -> str:
    """A YAML error in one line: PyYAML's own message spans several (the context, the
    offending line quoted, a caret), which a one-line CLI error or a notification cannot hold."""
    problem = getattr(err, "problem", None)
    if not problem:
        return " ".join(str(err).split())
    mark = getattr(err, "problem_mark", None)
    context = getattr(err, "context", None)
    text = f"{context}: {problem}" if context else str(problem)
    if mark is not None:
        text += " " + _("(line {line}, column {column})").format(line=mark.line + 1, column=mark.column + 1)
    return text
