"""graph.kernels.compile_together: kernels built several to a translation unit, and the fall-back
when a shared unit does not build (each kernel then built on its own)."""
import numpy as np
import pytest

import tessera
from tessera.graph import kernels as K
from tessera.graph.ir import TensorType
from tessera.ops import get_op


def _requests(shapes):
    attrs = get_op("nn.matmul").normalize_attrs({})
    return [("nn.matmul", attrs, (TensorType((m, k), "float32"), TensorType((k, n), "float32")),
             (TensorType((m, n), "float32"),), f"mm{i}") for i, (m, k, n) in enumerate(shapes)]


def _check(kernel, m, k, n):
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((m, k), np.float32), rng.standard_normal((k, n), np.float32)
    out = np.zeros((m, n), np.float32)
    kernel.fn(a, b, out)
    np.testing.assert_allclose(out, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("unit_fails", [False, True])
def test_compile_together_builds_every_kernel_and_falls_back_alone(monkeypatch, unit_fails):
    monkeypatch.setenv("TESSERA_BUILD_JOBS", "1")
    shapes = [(3, 37, 5), (7, 11, 13), (5, 29, 3)] if unit_fails else [(3, 41, 5), (7, 13, 13), (5, 31, 3)]
    ks = K.get_kernels(_requests(shapes), tessera.Target("c"), compile=False)
    assert not any(k.compiled for k in ks)
    calls = []
    real = K._compile_all

    def compile_all(sources, *args):
        calls.append(len(sources))
        if unit_fails and len(calls) == 1:      # the shared unit: the compiler refuses it
            return [tessera.errors.BuildError("refused") for _ in sources]
        return real(sources, *args)

    monkeypatch.setattr(K, "_compile_all", compile_all)
    K.compile_together(ks)
    assert all(k._fn is not None for k in ks)
    assert calls[0] == 1                         # one job: one unit holding the three kernels
    if unit_fails:
        assert calls[1:] == [3]                  # then each on its own
        assert all(k.compiled for k in ks) and len({id(k._module) for k in ks}) == 3
    else:
        # the functions come from the one shared library; no kernel's own library was built
        assert calls == [1] and len({k.fn.module.path for k in ks}) == 1
        assert not any(k.compiled for k in ks)
    for k, s in zip(ks, shapes):
        _check(k, *s)
    if not unit_fails:
        # a kernel's module stays its own library (its source holds that kernel alone), built when asked for
        monkeypatch.setattr(K, "_compile_all", real)
        shared = ks[0].fn.module.path
        own = ks[0].module
        assert own.path != shared and ks[0].compiled and own.function_names == [own.entry_name]
