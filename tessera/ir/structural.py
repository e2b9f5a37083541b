"""Structural equality and hashing of IR: same shape of tree, variables matched by position.

Variables and buffers introduced by a node (loop vars, block iter vars, let vars, function
params, allocated buffers) are matched up where they are defined; free variables must be the
same object unless `map_free_vars=True`. Names are ignored.
"""
from __future__ import annotations

import hashlib
import math
import struct
from types import MappingProxyType

from .buffer import Buffer
from .expr import IterVar, Var
from .node import Node


class _Equal:
    def __init__(self, map_free_vars):
        self.map_free = map_free_vars
        self.lhs_to_rhs = {}
        self.rhs_to_lhs = {}

    def define(self, a, b):
        if isinstance(a, (Var, Buffer)) and isinstance(b, (Var, Buffer)):
            if type(a) is not type(b):
                return False
            prev = self.lhs_to_rhs.get(a)
            if prev is not None:
                return prev is b
            if b in self.rhs_to_lhs:
                return False
            self.lhs_to_rhs[a] = b
            self.rhs_to_lhs[b] = a
            if isinstance(a, Buffer):
                # a buffer definition also defines the symbolic variables of its shape (as TVM)
                saved, self.map_free = self.map_free, True
                try:
                    return self.fields(a, b)
                finally:
                    self.map_free = saved
            return a.dtype == b.dtype
        return self.eq(a, b)

    def var_eq(self, a, b):
        m = self.lhs_to_rhs.get(a)
        if m is not None:
            return m is b
        if a is b:  # record it, so that a later free-var mapping cannot pair `a` with another
            if b in self.rhs_to_lhs:
                return False
            self.lhs_to_rhs[a] = a
            self.rhs_to_lhs[a] = a
            return True
        if self.map_free and b not in self.rhs_to_lhs and type(a) is type(b):
            return self.define(a, b)
        return False

    def eq(self, a, b):
        if a is b and not isinstance(a, (Var, Buffer)):
            return True
        ta = type(a)
        if ta is not type(b):
            return False
        if isinstance(a, Var):
            return self.var_eq(a, b)
        if isinstance(a, Buffer):
            if a in self.lhs_to_rhs or b in self.rhs_to_lhs or a is b:
                return self.var_eq(a, b)
            if self.map_free:
                return self.define(a, b)
            return False
        if isinstance(a, Node):
            return self.fields(a, b)
        if ta is tuple:
            return len(a) == len(b) and all(self.eq(x, y) for x, y in zip(a, b))
        if ta is MappingProxyType or ta is dict:
            return a.keys() == b.keys() and all(self.eq(a[k], b[k]) for k in a)
        if ta is float:  # 0.0 and -0.0 differ (1/x tells them apart); all NaNs are one NaN
            return (a == b and math.copysign(1.0, a) == math.copysign(1.0, b)) or (a != a and b != b)
        return a == b

    def fields(self, a, b):
        defs = a._def_fields
        for f in defs:
            x, y = getattr(a, f), getattr(b, f)
            if isinstance(x, tuple):
                if len(x) != len(y):
                    return False
                for xi, yi in zip(x, y):
                    if not self._def_one(xi, yi):
                        return False
            elif not self._def_one(x, y):
                return False
        ignore = a._ignore_fields
        for f in a._fields:
            if f in ignore or f in defs:
                continue
            if not self.eq(getattr(a, f), getattr(b, f)):
                return False
        return True

    def _def_one(self, x, y):
        if isinstance(x, IterVar):
            if not isinstance(y, IterVar) or x.iter_type != y.iter_type or x.thread_tag != y.thread_tag:
                return False
            if not self.eq(x.dom, y.dom):
                return False
            return self.define(x.var, y.var)
        return self.define(x, y)


def structural_equal(a, b, map_free_vars: bool = False) -> bool:
    """True when a and b are the same program up to variable/buffer renaming at definitions."""
    return _Equal(map_free_vars).eq(a, b)


class _Hasher:
    def __init__(self):
        self.ids = {}
        self.h = hashlib.blake2b(digest_size=8)

    def put(self, s: str):
        self.h.update(s.encode())
        self.h.update(b"\0")

    def node(self, x):
        if isinstance(x, (Var, Buffer)):
            idx = self.ids.get(x)
            if idx is None:
                idx = self.ids[x] = len(self.ids)
                self.put(f"def{idx}:{type(x).__name__}")
                if isinstance(x, Buffer):
                    self.fields(x)
                else:
                    self.put(x.dtype)
            else:
                self.put(f"ref{idx}")
            return
        if isinstance(x, Node):
            self.put(type(x).__name__)
            self.fields(x)
        elif isinstance(x, tuple):
            self.put(f"tuple{len(x)}")
            for y in x:
                self.node(y)
        elif isinstance(x, (MappingProxyType, dict)):
            self.put(f"map{len(x)}")
            for k in sorted(x, key=str):
                self.put(str(k))
                self.node(x[k])
        elif isinstance(x, float):
            self.h.update(struct.pack("<d", x) if x == x else b"nan")
        else:
            self.put(f"{type(x).__name__}:{x}")

    def fields(self, n):
        ignore = n._ignore_fields
        for f in n._fields:
            if f not in ignore:
                self.node(getattr(n, f))


def structural_hash(x) -> int:
    """A hash consistent with structural_equal(map_free_vars=True)."""
    h = _Hasher()
    h.node(x)
    return int.from_bytes(h.h.digest(), "little")
