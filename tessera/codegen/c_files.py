"""The C runtime helpers shipped with the code generator: real .c/.h files in tessera/codegen/runtime_c/
(package data), read once and pasted into generated translation units, only the sections a unit uses.

A file is C that compiles on its own; a line `//@ name` (or `//@ name: dep1 dep2`) starts a section
that runs to the next such line, and what comes before the first section (a description, the
#includes that let the file compile alone) is never pasted. Pasting the text rather than #including
the file keeps a compiled library self-contained: it is relocatable and `get_source()` shows all of it.
`sections(filename, directory)` reads a file of the same form elsewhere (the x86 conv micro-kernel's
C template, tir/tensor_intrin/x86_conv.c).
"""
from __future__ import annotations

import os
import re
from typing import NamedTuple

from ..errors import TesseraError

DIRECTORY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "runtime_c")
_MARK = re.compile(r"^//@ ([A-Za-z_]\w*)(?::([ \w]*))?[ \t]*$", re.M)


class Section(NamedTuple):
    name: str
    code: str
    deps: tuple


_CACHE: dict = {}


def sections(filename: str, directory: str | None = None) -> dict:
    """name -> Section of runtime_c/`filename` (or of `filename` in `directory`), in file order."""
    path = os.path.join(directory or DIRECTORY, filename)
    found = _CACHE.get(path)
    if found is not None:
        return found
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        data = path if directory else "tessera/codegen/runtime_c/*.c, *.h"
        raise TesseraError(f"the C file {path} cannot be read ({e.strerror}); tessera was installed "
                           f"without its package data ({data})") from None
    marks = list(_MARK.finditer(text))
    if not marks:
        raise TesseraError(f"the C runtime file {path} has no `//@ name` section")
    found = {}
    for k, m in enumerate(marks):
        end = marks[k + 1].start() if k + 1 < len(marks) else len(text)
        name = m.group(1)
        if name in found:
            raise TesseraError(f"the C runtime file {path} has two sections named {name}")
        found[name] = Section(name, text[m.end() + 1:end].rstrip("\n"), tuple((m.group(2) or "").split()))
    for s in found.values():
        for d in s.deps:
            if d not in found:
                raise TesseraError(f"{path}: section {s.name} depends on {d}, which the file does not define")
    _CACHE[path] = found
    return found


def section(filename: str, name: str) -> str:
    """The C text of one section of runtime_c/`filename`."""
    s = sections(filename).get(name)
    if s is None:
        raise TesseraError(f"the C runtime file {filename} has no section {name!r} "
                           f"(it has {', '.join(sections(filename))})")
    return s.code


def used_sections(filename: str, code: str) -> list:
    """The texts, in file order, of the sections of `filename` that `code` calls (`name(`) and of
    those they depend on."""
    secs = sections(filename)
    used = {name for name in secs if name + "(" in code}
    todo = list(used)
    while todo:
        for d in secs[todo.pop()].deps:
            if d not in used:
                used.add(d)
                todo.append(d)
    return [s.code for name, s in secs.items() if name in used]
