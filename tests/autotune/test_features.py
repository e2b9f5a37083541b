"""Per-store program features (tessera.autotune.features): fixed width for every kind of program,
values derived from the program (extent products x dtype sizes), and the expected direction when a
schedule changes."""
import pathlib
import re

import numpy as np
import pytest

from tessera import te, tir
from tessera.autotune.features import (BUFFER_SLOTS, LEVELS, NUM_FEATURES, extract_features, extract_features_batch,
                                       feature_names, log_columns)
from tessera.errors import TesseraError
from tessera.target import Target
from tessera.tir.schedule.examples import conv2d as conv_example
from tessera.tir.schedule.examples import gemm as gemm_example

TARGET = Target("c -num-threads=2")
NAMES = feature_names()
LOG = log_columns()


def col(rows, name, r=-1):
    """A feature of row r in its natural scale (the log2(1 + x) columns inverted)."""
    i = NAMES.index(name)
    v = float(rows[r, i])
    return 2.0 ** v - 1.0 if LOG[i] else v


def near(x):
    """x as a float32 log2(1 + x) column gives it back (a relative error of a few 1e-7)."""
    return pytest.approx(x, rel=2e-5, abs=1e-6)


def gemm(M, N, K, dtype="float32"):
    A = te.placeholder((M, K), name="A", dtype=dtype)
    B = te.placeholder((K, N), name="B", dtype=dtype)
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return te.create_prim_func([A, B, C])


def elementwise(n=128, m=64):
    A = te.placeholder((n, m), name="A")
    B = te.compute((n, m), lambda i, j: te.exp(A[i, j]) * 2.0 + 1.0, name="B")
    return te.create_prim_func([A, B])


def softmax_rows(n=16, m=48):
    x = te.placeholder((n, m), name="x")
    k = te.reduce_axis((0, m), name="k")
    mx = te.compute((n,), lambda i: te.max(x[i, k], axis=k), name="mx")
    e = te.compute((n, m), lambda i, j: te.exp(x[i, j] - mx[i]), name="e")
    return te.create_prim_func([x, e])


def rfactor_sum(n=1000):
    x = te.placeholder((n,), name="x")
    k = te.reduce_axis((0, n), name="k")
    s = te.compute((1,), lambda i: te.sum(x[k], axis=k), name="s")
    sch = tir.Schedule(te.create_prim_func([x, s]))
    _, kk = sch.get_loops(sch.get_block("s"))
    _, k1 = sch.split(kk, [None, 16])
    sch.rfactor(k1, 0)
    return sch


def tensorized_gemm(M=128, N=64, K=64, mr=4, nr=16, kc=32, mc=32):
    try:
        tir.tensor_intrin.x86.gemm_intrin_for(TARGET, "float32", tiles=[(mr, nr)])
    except TesseraError:
        pytest.skip("the target has no fp32 GEMM micro-kernel of this tile")
    func = gemm_example.gemm_program(M, N, K, nr=nr)
    return gemm_example.schedule_gemm(func, mr=mr, nr=nr, kc=kc, mc=mc, target=TARGET)


def test_names_match_width_and_are_unique():
    assert len(NAMES) == NUM_FEATURES == len(set(NAMES))
    assert LOG.shape == (NUM_FEATURES,)


@pytest.mark.parametrize("make", [
    lambda: elementwise(),
    lambda: softmax_rows(),
    lambda: gemm(32, 24, 16),
    lambda: gemm(32, 32, 32, "int32"),
    lambda: conv_example.conv2d_program(1, 8, 10, 10, 16, 3, 3, pad=1, ocb=16),
    lambda: rfactor_sum(),
    lambda: tensorized_gemm(),
], ids=["elementwise", "reduction", "gemm", "gemm-int32", "conv", "rfactor", "tensorized"])
def test_fixed_width_for_every_program(make):
    rows = extract_features(make(), TARGET)
    assert rows.dtype == np.float32 and rows.ndim == 2 and rows.shape[1] == NUM_FEATURES
    assert rows.shape[0] >= 1 and np.isfinite(rows).all() and (rows >= 0).all()


def test_one_row_per_store_in_program_order():
    # softmax_rows: max's init, max's update, the exp stage
    rows = extract_features(softmax_rows(16, 48), TARGET)
    assert rows.shape[0] == 3
    assert col(rows, "store.constant", 0) == near(1.0)            # mx = -inf
    assert col(rows, "compute.float.cmp", 1) == near(16 * 48)     # max over k
    assert col(rows, "compute.float.math", 2) == near(16 * 48)    # exp


def test_symbolic_extents_are_refused_naming_the_variable():
    n = te.var("n")
    A = te.placeholder((n, 4), name="A")
    B = te.compute((n, 4), lambda i, j: A[i, j] + 1.0, name="B")
    with pytest.raises(TesseraError, match=r"\bn\b.*static"):
        extract_features(te.create_prim_func([A, B]), TARGET)


def test_counts_and_bytes_follow_the_program():
    M, N, K = 32, 24, 16
    rows = extract_features(gemm(M, N, K), TARGET)
    assert rows.shape[0] == 2                                # C's init, C's update
    assert col(rows, "loops.outer_prod") == near(M * N * K)
    assert col(rows, "compute.float.fma") == near(M * N * K)       # C + A * B is one FMA
    assert col(rows, "compute.flops") == near(2 * M * N * K)
    assert col(rows, "store.readwrite") == near(1.0)
    # slots: C (read and written: twice the bytes), then A, B (equal bytes, by name)
    assert col(rows, "buf0.access.readwrite") == near(1.0)
    assert col(rows, "buf0.bytes") == pytest.approx(2 * M * N * K * 4, rel=1e-5)
    assert col(rows, "buf1.bytes") == pytest.approx(M * N * K * 4, rel=1e-5)
    assert col(rows, "buf1.unique_bytes") == pytest.approx(M * K * 4, rel=1e-5)   # A
    assert col(rows, "buf2.unique_bytes") == pytest.approx(K * N * 4, rel=1e-5)   # B
    # A[i, k] does not depend on j: reused across j, K * 4 bytes of A touched per pass of k
    assert col(rows, "buf1.reuse.loop") == near(1.0)
    assert col(rows, "buf1.reuse.ct") == near(N)
    assert col(rows, "buf1.footprint_bytes.L0") == pytest.approx(K * 4, rel=1e-5)
    # B[k, j] along k: a stride of N elements, one cache line per k
    assert col(rows, "buf2.stride.innermost") == near(N)
    assert col(rows, "buf2.footprint_lines.L0") == near(K)
    intensity = 2 * M * N * K / ((M * N + M * K + K * N) * 4)
    assert col(rows, "intensity.total") == pytest.approx(intensity, rel=1e-4)


def test_vectorize_sets_lanes_and_the_one_hot():
    func = elementwise(128, 64)
    plain = extract_features(func, TARGET)
    sch = tir.Schedule(func)
    _, j = sch.get_loops(sch.get_block("B"))
    _, j1 = sch.split(j, [None, 8])
    sch.vectorize(j1)
    vec = extract_features(sch, TARGET)
    assert col(plain, "loop.L0.serial") == 1.0 and col(plain, "vec.lanes") == near(0.0)
    assert col(vec, "loop.L0.vectorized") == 1.0 and col(vec, "loop.L0.serial") == 0.0
    assert col(vec, "loop.L0.extent") == near(8) and col(vec, "vec.lanes") == near(8)
    assert col(vec, "vec.innermost") == near(1.0)
    assert col(vec, "vec.width_ratio") == pytest.approx(8 * 32 / TARGET.vector_bits)
    # the work is the same
    assert col(vec, "compute.float.math") == col(plain, "compute.float.math") == near(128 * 64)


def test_parallel_extent_and_balance_follow_the_target_threads():
    sch = tir.Schedule(elementwise(96, 64))
    i, _ = sch.get_loops(sch.get_block("B"))
    i0, _ = sch.split(i, [None, 32])          # 3 chunks over the target's threads
    sch.parallel(i0)
    rows = extract_features(sch, TARGET)
    threads = TARGET.num_threads
    assert col(rows, "parallel.extent") == near(3) and col(rows, "parallel.outermost") == 1.0
    assert col(rows, "parallel.balance") == pytest.approx(3 / (-(-3 // threads) * threads))


def test_a_panel_tile_lowers_the_cache_lines_of_B_at_the_outer_level():
    M = N = K = 64
    naive = extract_features(gemm(M, N, K), TARGET)      # i, j, k
    sch = tir.Schedule(gemm(M, N, K))
    i, j, k = sch.get_loops(sch.get_block("C"))
    j0, j1 = sch.split(j, [None, 16])                     # 16 floats: one 64-byte line per row of B
    sch.reorder(j0, i, k, j1)
    tiled = extract_features(sch, TARGET)
    # under the outermost loop: naive (i) sweeps all of B, tiled (j0) one K x 16 panel of it
    assert col(naive, "buf2.footprint_lines.L1") == near(K * N * 4 // 64)
    assert col(tiled, "buf2.footprint_lines.L2") == near(K * 16 * 4 // 64)
    assert col(tiled, "buf2.footprint_bytes.L2") == near(K * 16 * 4)
    assert col(tiled, "buf2.footprint_lines.L2") < col(naive, "buf2.footprint_lines.L1")
    # the whole program still touches all of B, once each
    assert col(tiled, "buf2.unique_bytes") == col(naive, "buf2.unique_bytes") == near(K * N * 4)


def test_allocation_size_is_the_compacted_footprint():
    sch = tir.Schedule(gemm(64, 64, 64))
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    i0, i1 = sch.split(i, [None, 8])
    j0, j1 = sch.split(j, [None, 16])
    sch.reorder(i0, j0, k, i1, j1)
    cw = sch.cache_write(c, 0, "global")
    sch.reverse_compute_at(cw, j0)
    rows = extract_features(sch, TARGET)
    allocated = [r for r in range(rows.shape[0]) if col(rows, "alloc.allocated", r) == 1.0]
    assert allocated
    for r in allocated:  # an 8 x 16 tile of C, allocated once per (i0, j0)
        assert col(rows, "alloc.bytes", r) == near(8 * 16 * 4)
        assert col(rows, "alloc.outer_prod", r) == near((64 // 8) * (64 // 16))


def test_tensorized_call_counts_the_intrinsic_work():
    M, N, K, mr, nr, kc, mc = 128, 64, 64, 4, 16, 32, 32
    sch = tensorized_gemm(M, N, K, mr, nr, kc, mc)
    rows = extract_features(sch, TARGET)
    calls = [r for r in range(rows.shape[0]) if col(rows, "store.tensorized", r) == 1.0]
    assert len(calls) == 1
    r = calls[0]
    assert col(rows, "compute.intrin.calls", r) == near((M // mr) * (N // nr) * (K // kc))
    assert col(rows, "compute.intrin.flops", r) == near(2 * M * N * K)
    assert col(rows, "compute.float.fma", r) == near(M * N * K)
    # the same work as the untensorized program
    plain = extract_features(gemm_example.gemm_program(M, N, K, nr=nr), TARGET)
    assert sum(col(rows, "compute.flops", x) for x in range(rows.shape[0])) == \
        near(sum(col(plain, "compute.flops", x) for x in range(plain.shape[0])))
    # C's init runs under `if k_0 == 0` (k_0 is outside the tile): once per element of C, not K / kc times
    inits = [x for x in range(rows.shape[0]) if col(rows, "store.constant", x) == 1.0 and col(rows, "store.guards", x)]
    assert inits and all(col(rows, "loops.outer_prod", x) == near(M * N) for x in inits)
    # the slots hold A, B_pack (read) and C (read and written)
    kinds = {(col(rows, f"buf{s}.access.read", r), col(rows, f"buf{s}.access.readwrite", r)) for s in range(3)}
    assert kinds == {(1.0, 0.0), (0.0, 1.0)}


def test_batch_matches_one_by_one_and_is_deterministic():
    progs = [elementwise(), gemm(16, 16, 16), rfactor_sum()]
    batch = extract_features_batch(progs, "c -num-threads=2")
    for p, b in zip(progs, batch):
        np.testing.assert_array_equal(b, extract_features(p, TARGET))


def test_every_column_is_documented():
    doc = (pathlib.Path(__file__).parents[2] / "docs" / "autotune_features.md").read_text()
    patterns = {re.sub(r"buf\d+\.", "buf<s>.", re.sub(r"\.L\d+", ".L<k>", n)) for n in NAMES}
    missing = sorted(p for p in patterns if f"`{p}`" not in doc)
    assert not missing, f"columns not documented in docs/autotune_features.md: {missing}"
    assert f"(n_stores, {NUM_FEATURES})" in doc
    assert f"k = 0..{LEVELS - 1} ({LEVELS} levels)" in doc and f"s = 0..{BUFFER_SLOTS - 1} ({BUFFER_SLOTS} slots)" in doc


def test_auto_unroll_annotation_and_unrolled_loops():
    sch = tir.Schedule(elementwise(64, 64))
    i, j = sch.get_loops(sch.get_block("B"))
    j0, j1 = sch.split(j, [None, 4])
    sch.annotate(i, "pragma_auto_unroll_max_step", 16)
    sch.annotate(j0, "a_text_annotation", "ignored")
    sch.unroll(j1)
    rows = extract_features(sch, TARGET)
    assert col(rows, "unroll.max_step") == near(16)
    assert col(rows, "unroll.num") == near(1) and col(rows, "unroll.prod") == near(4)
    assert col(rows, "loop.L0.unrolled") == 1.0


def test_thread_bindings_and_allocation_scopes():
    sch = tir.Schedule(gemm(64, 64, 64))
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    i0, i1 = sch.split(i, [None, 16])
    j0, j1 = sch.split(j, [None, 32])
    sch.reorder(i0, j0, i1, j1, k)
    cw = sch.cache_write(c, 0, "local")
    sch.reverse_compute_at(cw, j1)
    sch.bind(i0, "blockIdx.x")
    sch.bind(j0, "blockIdx.y")
    sch.bind(j1, "threadIdx.x")
    rows = extract_features(sch, TARGET)
    update = max(range(rows.shape[0]), key=lambda r: col(rows, "compute.flops", r))
    assert col(rows, "gpu.blockIdx.x", update) == near(4) and col(rows, "gpu.blockIdx.y", update) == near(2)
    assert col(rows, "gpu.threadIdx.x", update) == near(32) and col(rows, "gpu.threadIdx.y", update) == near(0)
    assert col(rows, "alloc.local", update) == 1.0 and col(rows, "alloc.shared", update) == 0.0
    # a CPU program has no thread bindings
    assert not any(col(extract_features(gemm(8, 8, 8), TARGET), f"gpu.{t}") for t in ("blockIdx.x", "threadIdx.x"))
