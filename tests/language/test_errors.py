"""Errors name the kernel's own source line: mismatched broadcasts, non-power-of-two aranges, a
runtime value used as a block shape or a Python bool, loops the compiler cannot take."""
import inspect

import numpy as np
import pytest

import tessera
import tessera.language as tl
from tessera.language import KernelError


def _line_of(fn, text):
    lines, first = inspect.getsourcelines(fn.fn)
    for i, line in enumerate(lines):
        if text in line:
            return first + i
    raise AssertionError(f"{text!r} not in {fn.__name__}")


@tessera.jit
def bad_broadcast(X, BLOCK: tl.constexpr):
    a = tl.arange(0, BLOCK)
    b = tl.arange(0, 2 * BLOCK)
    tl.store(X + a, a + b)


@tessera.jit
def odd_arange(X, N: tl.constexpr):
    offs = tl.arange(0, N)
    tl.store(X + offs, offs)


@tessera.jit
def runtime_shape(X, n):
    offs = tl.arange(0, n)
    tl.store(X + offs, offs)


@tessera.jit
def runtime_if(X, n):
    if n > 3:
        tl.store(X, 1.0)


@tessera.jit
def break_in_loop(X, n):
    for i in range(n):
        break


@tessera.jit
def carried_type_changes(X, n, BLOCK: tl.constexpr):
    acc = 0.0
    for i in range(n):
        acc = acc + tl.load(X + tl.arange(0, BLOCK))
    tl.store(X + tl.arange(0, BLOCK), acc)


@tessera.jit
def dot_mismatch(X, BLOCK: tl.constexpr):
    a = tl.zeros((BLOCK, BLOCK), tl.float32)
    b = tl.zeros((2 * BLOCK, BLOCK), tl.float32)
    tl.store(X + tl.arange(0, BLOCK), tl.sum(tl.dot(a, b), axis=1))


def _error(kernel, *args, interpret=False, **meta):
    with pytest.raises(KernelError) as e:
        kernel[(1,)](*args, **meta, interpret=interpret)
    return str(e.value)


@pytest.mark.parametrize("interpret", [False, True])
def test_mismatched_broadcast_names_its_line(interpret):
    msg = _error(bad_broadcast, np.zeros(64, np.float32), BLOCK=16, interpret=interpret)
    line = _line_of(bad_broadcast, "tl.store(X + a, a + b)")
    assert f"test_errors.py:{line}" in msg and "tl.store(X + a, a + b)" in msg
    assert "cannot broadcast blocks of shapes [16] and [32]" in msg


def test_non_power_of_two_arange_is_refused_at_its_line():
    msg = _error(odd_arange, np.zeros(64, np.float32), N=10)
    assert f"test_errors.py:{_line_of(odd_arange, 'offs = tl.arange(0, N)')}" in msg
    assert "arange(0, 10): its length 10 is not a power of two" in msg


def test_runtime_value_as_block_shape_is_refused_at_its_line():
    msg = _error(runtime_shape, np.zeros(64, np.float32), 16)
    assert f"test_errors.py:{_line_of(runtime_shape, 'offs = tl.arange(0, n)')}" in msg
    assert "runtime value" in msg and "block shape" in msg


def test_runtime_condition_in_python_if_is_refused_at_its_line():
    msg = _error(runtime_if, np.zeros(4, np.float32), 7)
    assert f"test_errors.py:{_line_of(runtime_if, 'if n > 3:')}" in msg
    assert "tl.where" in msg


def test_break_in_a_runtime_loop_is_refused_at_its_line():
    msg = _error(break_in_loop, np.zeros(4, np.float32), 7)
    line = _line_of(break_in_loop, "        break")
    assert f"test_errors.py:{line}" in msg and "'break' inside a runtime for loop" in msg


@pytest.mark.parametrize("interpret", [False, True])
def test_loop_carried_value_changing_type_names_it(interpret):
    msg = _error(carried_type_changes, np.zeros(16, np.float32), 2, BLOCK=16, interpret=interpret)
    assert "'acc' is fp32 before the loop and <16 x fp32> after its body" in msg


def test_dot_with_mismatched_inner_extents_names_its_line():
    msg = _error(dot_mismatch, np.zeros(16, np.float32), BLOCK=16)
    assert f"test_errors.py:{_line_of(dot_mismatch, 'tl.dot(a, b)')}" in msg
    assert "inner extents differ" in msg


def test_ops_outside_a_kernel_are_refused():
    with pytest.raises(tessera.TesseraError, match="only inside a kernel"):
        tl.arange(0, 16)


def test_calling_a_kernel_without_a_grid_says_how_to_launch():
    with pytest.raises(tessera.TesseraError, match=r"launch it as bad_broadcast\[grid\]"):
        bad_broadcast(np.zeros(4, np.float32), BLOCK=4)
