"""The matmul schedules' tunable decisions (ScheduleContext.choose knobs): every sampled setting is a
correct program, and the default (no knobs, or every knob at its first candidate) is the hand
schedule itself."""
import numpy as np
import pytest

import tessera
from tessera import te, tir
from tessera.ir import structural_equal
from tessera.ops.nn.dense import pack_panel
from tessera.ops.registry import Knobs, ScheduleContext, get_op
from tessera.target import Target

TARGET = "c -num-threads=2"
HOST = Target("c")
HAS_KERNELS = (HOST.has_feature("avx2") and HOST.has_feature("fma")) or HOST.has_feature("avx512f")
rng = np.random.default_rng(12)
n = te.var("n")

# (name, op, a shape, b shape, attrs, concrete M for a symbolic one)
CASES = [
    ("tiled", "nn.matmul", (64, 96), (96, 128), {}, None),           # micro-kernel, panels
    ("row_blocks", "nn.matmul", (264, 32), (32, 64), {}, None),      # micro-kernel, M > 256
    ("padded_n", "nn.matmul", (8, 32), (32, 70), {}, None),          # B in zero-padded panels
    ("gemv", "nn.matmul", (1, 64), (64, 256), {}, None),             # one row: column chunks
    ("loop", "nn.dense", (12, 40), (64, 40), {}, None),              # the loop schedule (ti, tj)
    ("batched", "nn.batch_matmul", (2, 8, 24), (2, 24, 32), {"transpose_b": False}, None),  # tiles, batch
    ("symbolic_rows", "nn.matmul", (n, 64), "packed", {}, 13),       # packed B, rows padded
    ("rows_prefetch", "nn.matmul", (32, 1024), "packed", {}, None),   # packed weights of 384 KB: all rows a call
    ("rows_batched", "nn.matmul", (4, 16, 512), "packed", {}, None),  # 4 matrices, 768 KB (Winograd's form)
]


def ints(*shape):
    return rng.integers(-4, 5, shape).astype("float32")


def func_of(case):
    _, op, sa, sb, attrs, _ = case
    o = get_op(op)
    A = te.placeholder(sa, name="A", dtype="float32")
    if sb == "packed":
        K, N = sa[-1], 96
        panel = pack_panel(None, N, TARGET)
        B = te.placeholder(tuple(sa[:-2]) + (-(-N // panel), K, panel), name="B", dtype="float32")
        attrs = dict(attrs, b_panel=panel, b_cols=N)
    else:
        B = te.placeholder(sb, name="B", dtype="float32")
    at = o.normalize_attrs(attrs)
    outs = o.compute_for([A, B], at, target=Target(TARGET))
    return o, at, te.create_prim_func([A, B, *outs])


def schedule(case, knobs=None, seed=None):
    o, at, func = func_of(case)
    sch = tir.Schedule(func, seed=seed)
    o.schedule(sch, ScheduleContext(block=case[1].split(".")[-1], attrs=at, target=Target(TARGET), knobs=knobs))
    return sch


def operands(case):
    _, op, sa, sb, attrs, m = case
    shape_a = tuple(m if not isinstance(d, int) else d for d in sa)
    a = ints(*shape_a)
    if sb == "packed":                   # B (batch..., K, 96) packed as (batch..., panels, K, panel)
        K, N = shape_a[-1], 96
        panel = pack_panel(None, N, TARGET)
        b = ints(*shape_a[:-2], K, N)
        bp = np.zeros(shape_a[:-2] + (-(-N // panel), K, panel), "float32")
        for p in range(bp.shape[-3]):
            w = b[..., p * panel:(p + 1) * panel]
            bp[..., p, :, :w.shape[-1]] = w
        return (a, bp), a @ b
    b = ints(*sb)
    if op == "nn.dense":
        return (a, b), a @ b.T
    return (a, b), a @ b


def check(case, sch):
    lib = tessera.build(sch.mod, target=TARGET)
    (a, b), want = operands(case)
    c = np.full(want.shape, np.nan, "float32")
    lib(a, b, c)
    np.testing.assert_array_equal(c, want, err_msg=f"{case[0]}: {sch.trace}")


def sampled_programs(case, seeds, most):
    """Up to `most` distinct programs from schedules with every knob sampled, each checked."""
    if case[0] in ("tiled", "row_blocks", "padded_n", "symbolic_rows", "rows_prefetch", "rows_batched") \
            and not HAS_KERNELS:
        pytest.skip("the host has no x86 GEMM micro-kernels")
    programs, names = [], set()
    for seed in seeds:
        knobs = Knobs()
        sch = schedule(case, knobs, seed=seed)
        assert knobs.names, "the schedule made no tunable decision"
        names.update(knobs.names)
        if any(structural_equal(sch.mod, p) for p in programs):
            continue
        programs.append(sch.mod)
        check(case, sch)
        if len(programs) == most:
            break
    return programs, names


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_sampled_knob_settings_are_correct_programs(case):
    programs, names = sampled_programs(case, range(1, 12), most=2)
    assert len(programs) == 2, f"{case[0]}: eleven seeds sampled one program (knobs {sorted(names)})"


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_many_sampled_knob_settings_are_correct_programs(case):
    programs, _ = sampled_programs(case, range(100, 124), most=24)
    assert len(programs) >= 2


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_default_choices_are_the_hand_schedule(case):
    """knobs None (the default compile) and a Knobs at every knob's first candidate (the default,
    recorded as a sample) give the same program: the hand schedule is a point of the space."""
    default = schedule(case)
    knobs = Knobs(decisions=[0] * 64)
    sampled = schedule(case, knobs, seed=3)
    assert knobs.names
    assert structural_equal(default.mod, sampled.mod)
    assert not any(i.kind.name == "SampleCategorical" for i in default.trace.insts)


@pytest.mark.skipif(not HAS_KERNELS, reason="the host has no x86 GEMM micro-kernels")
def test_default_tensorized_schedule_is_the_preferred_tile_and_structure():
    """What the default compile does (the knobs' defaults): the most preferred tile, the panel
    structure for M <= 256 (B panels in parallel), row blocks beyond."""
    src = tessera.build(schedule(CASES[0]).mod, target=TARGET).get_source()
    assert "tintrin_" in src and "omp parallel for" in src
    knobs = Knobs(decisions=[0] * 64)
    schedule(CASES[0], knobs, seed=1)
    assert knobs.names[:2] == ["gemm_tile", "gemm_structure"]
    knobs = Knobs(decisions=[0] * 64)
    schedule(CASES[1], knobs, seed=1)
    assert "gemm_mc" in knobs.names


@pytest.mark.skipif(not HAS_KERNELS, reason="the host has no x86 GEMM micro-kernels")
def test_large_weights_take_all_rows_a_call_and_prefetch_the_next_block():
    """Packed weights (pack_matmul_weights' B) of at least PREFETCH_BYTES, streaming from memory:
    one call of the rows intrinsic per B block, which prefetches the next. Weights that stay in cache,
    or a B computed at run time (attention's), keep a call per tile."""
    from tessera.ops.nn._cpu_schedule import PREFETCH_BYTES
    big, batched = CASES[-2], CASES[-1]
    assert 1024 * 96 * 4 >= PREFETCH_BYTES > 64 * 96 * 4
    src = tessera.build(schedule(big).mod, target=TARGET).get_source()
    assert "_f32_rows32_pf(" in src and "_mm_prefetch" in src
    # a batch of matrices counts all of B (Winograd's batched GEMMs: 16 or 36 matrices of weights)
    assert "_f32_rows16_pf(" in tessera.build(schedule(batched).mod, target=TARGET).get_source()
    small = ("small", "nn.matmul", (32, 64), "packed", {}, None)
    assert "_rows" not in tessera.build(schedule(small).mod, target=TARGET).get_source()
    runtime_b = ("runtime_b", "nn.matmul", (32, 1024), (1024, 128), {}, None)     # 512 KB, not packed
    assert "_rows" not in tessera.build(schedule(runtime_b).mod, target=TARGET).get_source()


@pytest.mark.parametrize("case", [CASES[0], CASES[4]], ids=["tiled", "loop"])
def test_knob_decisions_replay_the_same_program(case):
    """The tuner keeps a knob setting as its decisions: the same decisions (under another seed) give
    the same program, and so does replaying the trace on a fresh schedule."""
    if case[0] == "tiled" and not HAS_KERNELS:
        pytest.skip("the host has no x86 GEMM micro-kernels")
    sch = schedule(case, Knobs(), seed=7)
    decisions = [int(sch.trace.get_decision(i)) for i in sch.trace.insts if i.kind.name == "SampleCategorical"]
    assert decisions
    again = schedule(case, Knobs(decisions=decisions), seed=99)
    assert structural_equal(sch.mod, again.mod)
    replay = tir.Schedule(func_of(case)[2])
    tir.schedule.Trace.apply_json_to_schedule(sch.trace.as_json(), replay)
    assert structural_equal(sch.mod, replay.mod)
