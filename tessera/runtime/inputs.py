"""Binding a compiled model's inputs: positional and keyword arguments to one array per input,
checked by name and dtype (the graph executor and the ahead-of-time module check shapes their own
way: symbolic dimensions, or static shapes only).

Names here are the model's public names (an ONNX model's own input names, such as
"gpu_0/data_0"), not the sanitized names of the graph's Values."""
from __future__ import annotations

import numpy as np

from ..errors import DTypeError, ShapeError, TesseraError
from ..ir.dtype import dtype_of_numpy
from .ndarray import NDArray


def gather_inputs(graph: str, names: list, args, kwargs) -> dict:
    """{input name: value} from positional (in input order) and keyword arguments."""
    if len(args) > len(names):
        raise TesseraError(f"graph {graph!r} takes {len(names)} inputs ({', '.join(names) or 'none'}), "
                           f"got {len(args)} positional arguments")
    given = dict(zip(names, args))
    for k, v in kwargs.items():
        if k in given:
            raise TesseraError(f"input {k!r} is given both positionally and by name")
        given[k] = v
    return given


def named_inputs(inputs, kwargs) -> dict:
    """{input name: value} from run()'s dict and keyword arguments (a name given in both refused)."""
    given = dict(inputs or {})
    for k, v in kwargs.items():
        if k in given:
            raise TesseraError(f"input {k!r} is given twice")
        given[k] = v
    return given


def check_input_names(graph: str, names: list, given: dict, takes: list, internal: list | None = None) -> None:
    """Every input given, nothing else; `takes` describes the inputs ("name: type") for the error.

    internal: the inputs' sanitized value names, in the order of `names`: an unknown key that is
    one of them gets a hint naming the input's public name."""
    extra = sorted(set(given) - set(names), key=str)
    missing = [n for n in names if n not in given]
    if extra or missing:
        parts = ([f"missing {missing}"] if missing else []) + ([f"unknown {extra}"] if extra else [])
        hints = []
        if internal:
            public_of = {i: n for i, n in zip(internal, names) if i != n}
            hints = [f"{k!r} is the internal name of input {public_of[k]!r}" for k in extra
                     if isinstance(k, str) and k in public_of]
        hint = f" ({'; '.join(hints)}: inputs go by the model's own names)" if hints else ""
        raise TesseraError(f"graph {graph!r} inputs: {'; '.join(parts)}; it takes {takes}{hint}")


def input_array(name: str, x, want: np.dtype, dtype, type_text: str) -> np.ndarray:
    """`x` as a C-contiguous numpy array of dtype `want` (NDArrays, array-likes and Python scalars or
    lists converted; any other dtype refused, naming the input and the expected type)."""
    if isinstance(x, NDArray):
        x = x.numpy()
    if not isinstance(x, np.ndarray):
        if isinstance(x, (list, tuple, int, float, bool, np.generic)):
            x = np.asarray(x, dtype=want)
        elif hasattr(x, "__array__") or hasattr(x, "__dlpack__"):
            x = np.asarray(x)
        else:
            raise TesseraError(f"input {name!r}: expected an array of {type_text}, got {type(x).__name__}")
    if x.dtype != want:
        raise DTypeError(f"input {name!r}: dtype {dtype_name(x.dtype)}, the graph expects {dtype} ({type_text}); "
                         f"convert it with .astype")
    return x if x.flags.c_contiguous else np.ascontiguousarray(x)


def check_input_shape(name: str, x, spec) -> None:
    """Refuses an input array (numpy or device) whose rank or static dimensions are not its spec's."""
    if len(x.shape) != spec.ndim:
        raise ShapeError(f"input {name!r}: rank {len(x.shape)} (shape {tuple(x.shape)}), the graph expects rank "
                         f"{spec.ndim} ({spec})")
    for d, (got, dim) in enumerate(zip(x.shape, spec.shape)):
        if isinstance(dim, int) and got != dim:
            raise ShapeError(f"input {name!r}: dimension {d} is {got}, the graph expects {dim} (shape "
                             f"{tuple(x.shape)}, expected {spec})")


def dtype_name(d: np.dtype) -> str:
    """tessera's name of a numpy dtype, or numpy's when tessera has none."""
    try:
        return str(dtype_of_numpy(d))
    except TesseraError:
        return str(d)


__all__ = ["gather_inputs", "named_inputs", "check_input_names", "input_array", "check_input_shape", "dtype_name"]
