"""Names: the one fresh-name rule and the one identifier rule every layer uses (value names in the
graph, block and buffer names in schedules, C identifiers in generated code)."""
from __future__ import annotations

import re

_NOT_IDENT = re.compile(r"[^A-Za-z0-9_]")


def fresh_name(base: str, taken) -> str:
    """`base`, or `base_1`, `base_2`, ...: the first that is not in `taken` (anything with `in`)."""
    if base not in taken:
        return base
    k = 1
    while f"{base}_{k}" in taken:
        k += 1
    return f"{base}_{k}"


def numbered_name(base: str, last_suffix: dict, *taken) -> str:
    """The first `base_k` in none of the `taken` collections, k counting on from the suffix last given
    to base (`last_suffix` remembers it per base): a printer's many `i`s are numbered in linear time."""
    k = last_suffix.get(base, 0)
    while True:
        k += 1
        name = f"{base}_{k}"
        if all(name not in t for t in taken):
            break
    last_suffix[base] = k
    return name


def identifier(name: str, fallback: str = "t") -> str:
    """`name` as a C/Python identifier: every character outside [A-Za-z0-9_] becomes '_', leading
    and trailing '_' are dropped, an empty result is `fallback`, a leading digit gets `fallback_`."""
    s = _NOT_IDENT.sub("_", str(name)).strip("_") or fallback
    return s if not s[0].isdigit() else f"{fallback}_{s}"
