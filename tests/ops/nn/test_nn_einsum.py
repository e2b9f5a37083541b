"""einsum against numpy.einsum: contractions, diagonals, ellipsis broadcasting, implicit output."""
from functools import partial

import numpy as np
import pytest

import tessera
from op_check import infer, run_op as _run_op

run_op = partial(_run_op, schedule=True)  # every op runs with its default schedule
RNG = np.random.default_rng(29)


def rand(*shape, dtype="float32"):
    return RNG.standard_normal(shape).astype(dtype)


CASES = [
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("...ij,...jk->...ik", [(1, 3, 4), (2, 4, 5)]),
    ("ii->i", [(4, 4)]),
    ("ii", [(4, 4)]),
    ("...ii->...i", [(2, 3, 3)]),
    ("i,j->ij", [(3,), (4,)]),
    ("ij,jk", [(3, 4), (4, 2)]),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 2)]),
    ("ijk->kji", [(2, 3, 4)]),
    ("->", [()]),
]


@pytest.mark.parametrize("equation,shapes", CASES, ids=[c[0] for c in CASES])
def test_einsum_matches_numpy(equation, shapes):
    ops = [rand(*s) for s in shapes]
    (y,) = run_op("einsum", *ops, equation=equation)
    want = np.einsum(equation, *[o.astype(np.float64) for o in ops])
    assert y.shape == want.shape
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)


def test_einsum_integers_and_symbolic_batch():
    a = RNG.integers(-5, 5, (3, 2, 4)).astype(np.int32)
    b = RNG.integers(-5, 5, (4, 6)).astype(np.int32)
    (y,) = run_op("einsum", a, b, equation="bij,jk->bik", sym={0: ("B", 2, 4)})
    np.testing.assert_array_equal(y, np.einsum("bij,jk->bik", a, b))


@pytest.mark.parametrize("equation,types,match", [
    ("ij,jk->ik", [((3, 4), "float32"), ((5, 2), "float32")], "extents"),
    ("ij->ik", [((3, 4), "float32")], "in no operand"),
    ("ijk->i", [((3, 4), "float32")], "does not fit"),
    ("ij,jk->ik", [((3, 4), "float32")], "names 2 operands"),
    ("i1->i", [((3, 4), "float32")], "not a letter"),
    ("...i->i", [((2, 3, 4), "float32")], "no '...'"),
])
def test_einsum_refuses_bad_equations(equation, types, match):
    with pytest.raises(tessera.TesseraError, match=match):
        infer("einsum", *types, equation=equation)
