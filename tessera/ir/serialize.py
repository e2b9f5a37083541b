"""IR to JSON and back, without pickle: a versioned node table, generic over every Node's `_fields`.

    obj = to_json(func)            # a JSON-compatible dict
    func2 = from_json(obj)         # structural_equal(func, func2) and the same structural_hash
    text = save_json(func); func3 = load_json(text)     # TVM's names, as text

The document is `{"format": "tessera.ir", "version": 1, "types": [[name, [fields...]], ...],
"nodes": [[type index, value...], ...], "root": index}`. Every node object appears once in
`nodes`, children before parents, so a Var, Buffer or IterVar referenced from many places is one
shared object again after loading (the identity structural equality relies on). A field value is
JSON as such (None, bool, int, str, finite float, a list for a tuple) or a one-key object:
`{"@": i}` node i, `{"dtype": "float32"}` a DataType, `{"map": [[k, v], ...]}` a frozen mapping
(`{"dict": ...}` a dict), `{"float": "nan" | "inf" | "-inf"}` a non-finite float. Loading builds
nodes field by field (as `Node.replace` does), checking each type's field list against the class.
"""
from __future__ import annotations

import json
import math
from types import MappingProxyType

from ..errors import TesseraError
from .dtype import DataType
from .node import Node, frozen_map, new_node, set_field

FORMAT = "tessera.ir"
VERSION = 1

_NAN, _INF, _NINF = {"float": "nan"}, {"float": "inf"}, {"float": "-inf"}


def _node_classes() -> dict:
    """name -> class of every Node subclass defined so far (names must be unique)."""
    out, todo = {}, [Node]
    while todo:
        cls = todo.pop()
        for sub in cls.__subclasses__():
            todo.append(sub)
            prev = out.get(sub.__name__)
            if prev is not None and prev is not sub:
                raise TesseraError(f"IR serialization: two node classes are named {sub.__name__!r} "
                                   f"({prev.__module__} and {sub.__module__}); node type names must be unique")
            out[sub.__name__] = sub
    return out


_CLASSES: dict = {}


def _class_named(name: str):
    cls = _CLASSES.get(name)
    if cls is None:
        _CLASSES.update(_node_classes())
        cls = _CLASSES.get(name)
    return cls


class _Encoder:
    __slots__ = ("index", "nodes", "types", "type_list")

    def __init__(self):
        self.index = {}      # id(node) -> position in nodes
        self.nodes = []
        self.types = {}      # class -> position in type_list
        self.type_list = []

    def children(self, v, out):
        """The nodes inside a field value (tuples and mappings searched), appended to out."""
        if isinstance(v, Node):
            out.append(v)
        elif type(v) is tuple or type(v) is list:
            for x in v:
                if isinstance(x, (Node, tuple, list, MappingProxyType, dict)):
                    self.children(x, out)
        elif isinstance(v, (MappingProxyType, dict)):
            for k, x in v.items():
                self.children(k, out)
                self.children(x, out)

    def value(self, v, where):
        t = type(v)
        if t is str or t is int or t is bool or v is None:
            return v
        if t is DataType:
            return {"dtype": str.__str__(v)}
        if isinstance(v, Node):
            return {"@": self.index[id(v)]}
        if t is tuple:
            return [self.value(x, where) for x in v]
        if t is float:
            if math.isfinite(v):
                return v
            return _NAN if v != v else _INF if v > 0 else _NINF
        if t is MappingProxyType or t is dict:
            return {"map" if t is MappingProxyType else "dict":
                    [[self.value(k, where), self.value(x, where)] for k, x in v.items()]}
        raise TesseraError(f"IR serialization: {where} holds a {t.__module__}.{t.__name__} ({v!r:.60}); "
                           f"only nodes, dtypes, str, int, float, bool, None, tuples and mappings of them "
                           f"are serializable")

    def run(self, root) -> int:
        index, stack = self.index, [(root, False)]
        while stack:
            n, ready = stack.pop()
            if id(n) in index:
                continue
            cls = type(n)
            fields = cls._fields
            if not ready:
                stack.append((n, True))
                kids = []
                for f in fields:
                    self.children(getattr(n, f), kids)
                for k in reversed(kids):
                    if id(k) not in index:
                        stack.append((k, False))
                continue
            t = self.types.get(cls)
            if t is None:
                t = self.types[cls] = len(self.type_list)
                self.type_list.append([cls.__name__, list(fields)])
            entry = [t]
            for f in fields:
                entry.append(self.value(getattr(n, f), f"field {f!r} of a {cls.__name__}"))
            index[id(n)] = len(self.nodes)
            self.nodes.append(entry)
        return index[id(root)]


def to_json(node: Node) -> dict:
    """A JSON-compatible dict holding `node` and everything it references (see the module docstring)."""
    if not isinstance(node, Node):
        raise TesseraError(f"to_json serializes IR nodes, got {type(node).__name__}")
    enc = _Encoder()
    root = enc.run(node)
    return {"format": FORMAT, "version": VERSION, "types": enc.type_list, "nodes": enc.nodes, "root": root}


def _decode_value(v, built, k):
    t = type(v)
    if t is dict:
        if len(v) == 1:
            (key, x), = v.items()
            if key == "@":
                if type(x) is not int or not 0 <= x < k:
                    raise TesseraError(f"IR JSON: node {k} refers to node {x!r}, which is not an earlier node")
                return built[x]
            if key == "dtype":
                return DataType(x)
            if key == "map":
                return frozen_map({_decode_value(a, built, k): _decode_value(b, built, k) for a, b in x})
            if key == "dict":
                return {_decode_value(a, built, k): _decode_value(b, built, k) for a, b in x}
            if key == "float" and x in ("nan", "inf", "-inf"):
                return float(x)
        raise TesseraError(f"IR JSON: node {k} holds an unknown value {json.dumps(v)[:80]}")
    if t is list:
        return tuple([_decode_value(x, built, k) for x in v])
    return v


def from_json(obj) -> Node:
    """The node a `to_json` document holds; TesseraError for another format or version, an unknown
    node type, a type whose fields changed, or a malformed table."""
    if not isinstance(obj, dict) or obj.get("format") != FORMAT:
        fmt = obj.get("format") if isinstance(obj, dict) else type(obj).__name__
        raise TesseraError(f"IR JSON: expected a {FORMAT!r} document, got {fmt!r}")
    if obj.get("version") != VERSION:
        raise TesseraError(f"IR JSON: version {obj.get('version')!r} is not supported; this tessera reads "
                           f"version {VERSION}")
    try:
        types = []
        for name, fields in obj["types"]:
            cls = _class_named(name)
            if cls is None:
                raise TesseraError(f"IR JSON: unknown node type {name!r}")
            if tuple(fields) != cls._fields:
                raise TesseraError(f"IR JSON: node type {name} was written with fields {list(fields)}, but "
                                   f"this tessera's {name} has {list(cls._fields)}")
            types.append((cls, cls._fields))
        built = []
        for k, entry in enumerate(obj["nodes"]):
            cls, fields = types[entry[0]]
            if len(entry) != len(fields) + 1:
                raise TesseraError(f"IR JSON: node {k} ({cls.__name__}) has {len(entry) - 1} values for "
                                   f"{len(fields)} fields")
            n = new_node(cls)
            for f, v in zip(fields, entry[1:]):
                set_field(n, f, _decode_value(v, built, k) if type(v) in (dict, list) else v)
            built.append(n)
        root = obj["root"]
        if type(root) is not int or not 0 <= root < len(built):
            raise TesseraError(f"IR JSON: root {root!r} is not a node of the table ({len(built)} nodes)")
        return built[root]
    except TesseraError:
        raise
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as e:
        raise TesseraError(f"IR JSON: malformed document ({type(e).__name__}: {e})") from None


def save_json(node: Node) -> str:
    """to_json as text (TVM's name)."""
    return json.dumps(to_json(node), separators=(",", ":"))


def load_json(text: str) -> Node:
    """The node of save_json's text (TVM's name)."""
    try:
        obj = json.loads(text)
    except (TypeError, ValueError) as e:
        raise TesseraError(f"IR JSON: not JSON text ({e})") from None
    return from_json(obj)


__all__ = ["to_json", "from_json", "save_json", "load_json", "FORMAT", "VERSION"]
