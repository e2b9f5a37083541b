"""The tensor expression language: describe what an operator computes, then create_prim_func.

    A = te.placeholder((n, 64), name="A")
    k = te.reduce_axis((0, 64), name="k")
    C = te.compute((n, 32), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    func = te.create_prim_func([A, B, C])
"""
from .create_prim_func import create_prim_func
from .intrin import (abs, acos, acosh, all, any, asin, asinh, atan, atanh, ceil, const, cos, cosh,
                     erf, exp, exp2, floor, floordiv, floormod, fma, fmod, if_then_else, isinf, isnan, log, log1p, log2, log10, max_value,
                     min_value, pow, power, round, rsqrt, sigmoid, sin, sinh, size_var, sqrt, tan,
                     tanh, trunc, truncdiv, truncmod, var)
from .reduction import CommReducerFn, comm_reducer, max, min, sum
from .tensor import ComputeOp, PlaceholderOp, Tensor, compute, placeholder, reduce_axis

__all__ = ["create_prim_func", "placeholder", "compute", "reduce_axis", "Tensor", "PlaceholderOp",
           "ComputeOp", "var", "size_var", "const", "all", "any", "if_then_else", "min_value",
           "max_value", "comm_reducer", "CommReducerFn", "sum", "max", "min", "exp", "exp2", "log",
           "log2", "log10", "log1p", "sqrt", "rsqrt", "tanh", "sigmoid", "erf", "sin", "cos", "tan",
           "atan", "asin", "acos", "sinh", "cosh", "asinh", "acosh", "atanh", "abs", "floor", "ceil",
           "round", "trunc", "power", "pow", "fmod", "fma", "isnan",
           "isinf", "floordiv", "floormod", "truncdiv", "truncmod"]
