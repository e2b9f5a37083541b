"""The inputs a report profiles the model on when the caller gives none: seeded random values of each
input's type (integers 0 and 1, valid as token ids, segment ids and masks; symbolic dimensions 1)."""
from __future__ import annotations

import numpy as np

from ..errors import TesseraError


def sample_inputs(exe, symbol_value: int = 1, seed: int = 0, int_high: int = 2) -> dict:
    """{input name: array} for exe's inputs (exe.inputs: TensorSpecs); integers in [0, int_high)."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, spec in zip(exe.input_names, exe.inputs):
        if not hasattr(spec, "shape"):
            raise TesseraError(f"report: input {name!r} is a {spec}; give the inputs to profile on "
                               f"(exe.report(path, inputs={{{name!r}: ...}}))")
        shape = tuple(d if isinstance(d, int) else symbol_value for d in spec.shape)
        dt = np.dtype(spec.np_dtype)
        if dt == np.bool_:
            out[name] = rng.integers(0, 2, shape).astype(bool)
        elif np.issubdtype(dt, np.integer):
            out[name] = rng.integers(0, int_high, shape).astype(dt)
        else:
            out[name] = rng.standard_normal(shape).astype(np.float32).astype(dt)
    return out


__all__ = ["sample_inputs"]
