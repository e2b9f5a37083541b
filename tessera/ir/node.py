"""The base of every IR node: immutable, with its state listed in `_fields`.

Passes rebuild nodes with `replace(**changes)`; generic visitors walk `_fields`. Python's `==`
on expressions builds comparison nodes (as in TVM), so node identity is the Python hash and
structural comparison lives in `tessera.ir.structural_equal/structural_hash`.
"""
from __future__ import annotations

from types import MappingProxyType

# Constructors of immutable nodes bypass Node.__setattr__ with these (every ir module and arith's
# fast paths build nodes this way).
set_field = object.__setattr__
new_node = object.__new__

# The text printer behind Node.script(): ir/printer.py installs it when it loads (it imports the node
# classes, so they cannot import it); `tessera.ir` loads it with the nodes.
PRINTER: dict = {}


class Node:
    """Immutable IR node. Subclasses declare `__slots__` and list them all in `_fields`."""

    __slots__ = ()
    _fields: tuple[str, ...] = ()
    # fields that introduce variables/buffers (bound for structural equality)
    _def_fields: tuple[str, ...] = ()
    # fields structural equality ignores (names)
    _ignore_fields: tuple[str, ...] = ()

    def __setattr__(self, key, value):
        raise AttributeError(f"{type(self).__name__} is immutable; use .replace({key}=...)")

    def __delattr__(self, key):
        raise AttributeError(f"{type(self).__name__} is immutable")

    def replace(self, **changes):
        """A copy with some fields changed (no re-validation: the caller keeps types right)."""
        new = new_node(type(self))
        for f in self._fields:
            set_field(new, f, changes.pop(f) if f in changes else getattr(self, f))
        if changes:
            raise TypeError(f"{type(self).__name__} has no fields {sorted(changes)}")
        return new

    def same_as(self, other) -> bool:
        return self is other

    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self

    def __reduce__(self):
        raise TypeError("tessera IR is not pickled; serialize it with script() or JSON traces")

    def script(self) -> str:
        """The node's text form (ir/printer.py)."""
        return PRINTER["script"](self)

    def __str__(self):
        return self.script()


def frozen_map(d) -> MappingProxyType:
    """An immutable mapping (annotations, attrs)."""
    if isinstance(d, MappingProxyType):
        return d
    return MappingProxyType(dict(d or {}))


EMPTY_MAP = MappingProxyType({})
