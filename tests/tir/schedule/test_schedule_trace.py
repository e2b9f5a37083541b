"""Traces: the Python they print, JSON round trips, replay, decisions, corrupt JSON."""
import copy
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tessera import tir
from tessera.errors import ScheduleError, TesseraError
from tessera.ir import structural_equal
from tessera.tir.schedule import Trace

from schedule_helpers import check_gemm, gemm, schedule


def tiled(func=None, seed=0):
    sch = schedule(func or gemm(), seed=seed)
    b = sch.get_block("C")
    i, j, k = sch.get_loops(b)
    ti = sch.sample_perfect_tile(i, n=2, max_innermost_factor=16)
    io, ii = sch.split(i, factors=ti)
    jo, ji = sch.split(j, factors=[None, 16])
    ko, ki = sch.split(k, factors=[None, 4])
    sch.reorder(io, jo, ko, ii, ki, ji)
    fused = sch.fuse(io, jo)
    sch.parallel(fused)
    sch.vectorize(ji)
    sch.unroll(ki)
    step = sch.sample_categorical([0, 16, 64], probs=[0.25, 0.5, 0.25])
    sch.annotate(fused, "pragma_auto_unroll_max_step", step)
    return sch


def test_trace_prints_replayable_python():
    sch = tiled(seed=3)
    text = str(sch.trace)
    lines = text.splitlines()
    assert lines[0] == "# from tessera import tir"
    assert lines[1] == "def apply_trace(sch: tir.Schedule) -> None:"
    ti = sch.trace.decisions[sch.trace.insts[2]]
    step = sch.trace.decisions[sch.trace.insts[11]]
    assert lines[2:] == [
        '  b0 = sch.get_block(name="C", func_name="main")',
        "  l1, l2, l3 = sch.get_loops(block=b0)",
        f"  v4, v5 = sch.sample_perfect_tile(loop=l1, n=2, max_innermost_factor=16, decision={ti})",
        "  l6, l7 = sch.split(loop=l1, factors=[v4, v5], preserve_unit_iters=True, disable_predication=False)",
        "  l8, l9 = sch.split(loop=l2, factors=[None, 16], preserve_unit_iters=True, disable_predication=False)",
        "  l10, l11 = sch.split(loop=l3, factors=[None, 4], preserve_unit_iters=True, disable_predication=False)",
        "  sch.reorder(l6, l8, l10, l7, l11, l9)",
        "  l12 = sch.fuse(l6, l8, preserve_unit_iters=True)",
        "  sch.parallel(loop=l12)",
        "  sch.vectorize(loop=l9)",
        "  sch.unroll(loop=l11)",
        f"  v13 = sch.sample_categorical(candidates=[0, 16, 64], probs=[0.25, 0.5, 0.25], decision={step})",
        '  sch.annotate(block_or_loop=l12, ann_key="pragma_auto_unroll_max_step", ann_val=v13)',
    ]
    ns = {"tir": tir}
    exec(text, ns)
    fresh = schedule(gemm(), seed=99)
    ns["apply_trace"](fresh)
    assert structural_equal(fresh.mod, sch.mod)
    assert str(fresh.trace) == text
    assert str(schedule(gemm()).trace).endswith("  pass")


def _json_types_only(x):
    if isinstance(x, list):
        return all(_json_types_only(y) for y in x)
    return type(x) in (str, int, float)


def test_json_round_trip_replays_to_the_same_program():
    sch = tiled(seed=5)
    obj = sch.trace.as_json()
    assert _json_types_only(obj)
    obj = json.loads(json.dumps(obj))
    fresh = schedule(gemm(), seed=1234)
    Trace.apply_json_to_schedule(obj, fresh)
    assert structural_equal(fresh.mod, sch.mod)
    assert fresh.trace.as_json() == obj
    assert str(fresh.trace) == str(sch.trace)
    check_gemm(fresh)


def test_sampling_decisions_replay_exactly_under_another_seed():
    for seed in range(6):
        sch = tiled(seed=seed)
        fresh = schedule(gemm(), seed=seed + 100)
        sch.trace.apply_to_schedule(fresh)
        assert structural_equal(fresh.mod, sch.mod)
        assert list(fresh.trace.decisions.values()) == list(sch.trace.decisions.values())


def test_replaced_decisions_take_effect():
    sch = tiled(seed=2)
    tile_inst, step_inst = sch.trace.insts[2], sch.trace.insts[11]
    new_tile = [8, 8] if sch.trace.decisions[tile_inst] != [8, 8] else [4, 16]
    t2 = sch.trace.with_decision(tile_inst, new_tile).with_decision(step_inst, 2)
    assert sch.trace.decisions[tile_inst] != new_tile           # the original is unchanged
    fresh = schedule(gemm())
    t2.apply_to_schedule(fresh)
    ii = fresh.get_loops(fresh.get_block("C"))[2]
    assert fresh.get(ii).loop_var.name == "i_1" and fresh.get(ii).extent.value == new_tile[1]
    fused = fresh.get(fresh.get_loops(fresh.get_block("C"))[0])
    assert fused.annotations["pragma_auto_unroll_max_step"].value == 64
    check_gemm(fresh)
    # decision None: replay samples anew (still valid)
    t3 = sch.trace.with_decision(tile_inst, None)
    assert tile_inst not in t3.decisions
    again = schedule(gemm(), seed=7)
    t3.apply_to_schedule(again)
    assert again.trace.decisions[again.trace.insts[2]] is not None
    with pytest.raises(TesseraError, match="not a sampling instruction"):
        sch.trace.with_decision(sch.trace.insts[0], 1)


def test_decision_provider_chooses_decisions():
    sch = tiled(seed=4)
    seen = []

    def provider(inst, inputs, attrs, decision):
        seen.append(inst.kind.name)
        if inst.kind.name == "SamplePerfectTile":
            return [2, 32]
        return decision

    fresh = schedule(gemm())
    sch.trace.apply_to_schedule(fresh, decision_provider=provider)
    assert seen == ["SamplePerfectTile", "SampleCategorical"]
    assert fresh.trace.decisions[fresh.trace.insts[2]] == [2, 32]
    check_gemm(fresh)


def test_postproc_is_removed_on_request():
    sch = schedule(gemm())
    i, j, k = sch.get_loops(sch.get_block("C"))
    sch.enter_postproc()
    sch.parallel(i)
    plain = schedule(gemm())
    sch.trace.apply_to_schedule(plain, remove_postproc=True)
    assert plain.get(plain.get_loops(plain.get_block("C"))[0]).kind == "serial"
    assert len(sch.trace.as_json(remove_postproc=True)[0]) == 2
    full = schedule(gemm())
    sch.trace.apply_to_schedule(full)
    assert full.get(full.get_loops(full.get_block("C"))[0]).kind == "parallel"


def test_simplified_drops_unused_pure_instructions():
    sch = schedule(gemm(), seed=1)
    b = sch.get_block("C")
    sch.get_loops(b)                                   # unused
    i, j, k = sch.get_loops(b)
    sch.sample_perfect_tile(k, n=2)                     # unused
    sch.split(i, factors=[None, 8])
    simple = sch.trace.simplified()
    assert [inst.kind.name for inst in simple.insts] == ["GetBlock", "GetLoops", "Split"]
    fresh = schedule(gemm())
    simple.apply_to_schedule(fresh)
    assert structural_equal(fresh.mod, sch.mod)


def test_trace_append_pop_and_copy():
    sch = tiled(seed=1)
    t = sch.trace.copy()
    n = len(t)
    last = t.pop()
    assert last.kind.name == "Annotate" and len(t) == n - 1 and len(sch.trace) == n
    t.append(last)
    assert len(t) == n
    assert Trace().pop() is None


def test_replay_on_another_program_names_the_instruction():
    sch = tiled()
    with pytest.raises(ScheduleError, match=r"trace instruction 0 \(GetBlock\): get_block: .*no block 'C'"):
        sch.trace.apply_to_schedule(tir.Schedule(_other()))


def _other():
    from tessera import te

    A = te.placeholder((4,), name="A")
    X = te.compute((4,), lambda i: A[i] + 1.0, name="X")
    return te.create_prim_func([A, X])


def test_invalid_decision_in_json_is_a_schedule_error():
    obj = json.loads(json.dumps(tiled().trace.as_json()))
    obj[1][0][1] = [3, 5]                               # product 15, extent 64
    with pytest.raises(ScheduleError, match=r"trace instruction 2 \(SamplePerfectTile\).*multiplies to 15"):
        Trace.apply_json_to_schedule(obj, schedule(gemm()))


# ---------------------------------------------------------------------------------------------
# corrupt JSON: a TesseraError naming the instruction and the field, never a KeyError
# ---------------------------------------------------------------------------------------------
def _good():
    return json.loads(json.dumps(tiled().trace.as_json()))


def _corrupt(edit):
    obj = _good()
    edit(obj)
    return obj


CORRUPT = [
    (lambda o: o.clear(), r"must be \[instructions, decisions\]"),
    (lambda o: o.__setitem__(0, "x"), "the instructions must be a list"),
    (lambda o: o.__setitem__(1, {"a": 1}), "the decisions must be a list"),
    (lambda o: o[0].__setitem__(3, ["Split", []]), r"instruction 3 must be \[kind, inputs, attrs, outputs\]"),
    (lambda o: o[0][3].__setitem__(0, "Splitt"), r"instruction 3: unknown instruction kind 'Splitt'"),
    (lambda o: o[0][3].__setitem__(0, 7), "instruction 3: the kind must be a string"),
    (lambda o: o[0][3][1].__setitem__(0, "l99"), r"instruction 3 \(Split\): inputs\[0\] refers to 'l99'"),
    (lambda o: o[0][3][1].__setitem__(0, "loop"), r"instruction 3 \(Split\): inputs\[0\] 'loop' is neither"),
    (lambda o: o[0][3][1].__setitem__(0, None), r"instruction 3 \(Split\): inputs\[0\] None has JSON type"),
    (lambda o: o[0][3][1].__setitem__(0, {"x": 1}), r"inputs\[0\] .* has JSON type dict"),
    (lambda o: o[0][3][1].__setitem__(0, True), r"inputs\[0\] True has JSON type bool"),
    (lambda o: o[0][3][1][1].__setitem__(0, "v77"), r"inputs\[1\]\[0\] refers to 'v77'"),
    (lambda o: o[0][3].__setitem__(1, ["l1"]), r"instruction 3 \(Split\): 1 inputs, Split takes 2"),
    (lambda o: o[0][3].__setitem__(1, "l1"), r"instruction 3 \(Split\): inputs must be a list"),
    (lambda o: o[0][3].__setitem__(2, []), r"instruction 3 \(Split\): 0 attrs, Split takes 2"),
    (lambda o: o[0][0][2].__setitem__(0, '"C'), r"instruction 0 \(GetBlock\): attrs\[0\] .* not a well-formed"),
    (lambda o: o[0][0][2].__setitem__(0, "b0"), r"instruction 0 \(GetBlock\): attrs\[0\] refers to 'b0'"),
    (lambda o: o[0][3][2].__setitem__(0, "l1"), r"attrs\[0\] \(preserve_unit_iters\) cannot be a handle"),
    (lambda o: o[0][3].__setitem__(3, ["l4", "l4"]), r"outputs\[1\] 'l4' is already defined"),
    (lambda o: o[0][3].__setitem__(3, ["l1", "l5"]), r"outputs\[0\] 'l1' is already defined"),
    (lambda o: o[0][3].__setitem__(3, ["b4", "l5"]), r"outputs\[0\] 'b4' names a BlockRV, Split returns LoopRVs"),
    (lambda o: o[0][3].__setitem__(3, ["x4", "l5"]), r"outputs\[0\] 'x4' is not a handle name"),
    (lambda o: o[0][3].__setitem__(3, [4, "l5"]), r"outputs\[0\] 4 is not a handle name"),
    (lambda o: o[0][6].__setitem__(3, ["l20"]), r"instruction 6 \(Reorder\): Reorder has no outputs"),
    (lambda o: o[0][7].__setitem__(3, []), r"instruction 7 \(Fuse\): Fuse has one output"),
    (lambda o: o[1].__setitem__(0, [2]), r"decisions\[0\] must be \[instruction index, decision\]"),
    (lambda o: o[1].__setitem__(0, [99, 1]), r"decisions\[0\]: instruction index 99 is not in \[0, 13\)"),
    (lambda o: o[1].__setitem__(0, ["2", 1]), r"decisions\[0\]: instruction index '2'"),
    (lambda o: o[1].__setitem__(0, [3, 1]), r"decisions\[0\]: instruction 3 \(Split\) takes no decision"),
    (lambda o: o[1].append([2, [4, 16]]), r"decisions\[2\]: instruction 2 has two decisions"),
    (lambda o: o[1][0].__setitem__(1, "zz"), r"decisions\[0\] \(instruction 2, SamplePerfectTile\): decision"),
    (lambda o: o[0][2][2].__setitem__(0, float("nan")), r"attrs\[0\] is nan, not a finite number"),
]


@pytest.mark.parametrize("edit,message", CORRUPT)
def test_corrupt_json_names_instruction_and_field(edit, message):
    obj = _corrupt(edit)
    with pytest.raises(TesseraError, match=message):
        Trace.apply_json_to_schedule(obj, schedule(gemm()))


def test_json_with_wrong_argument_types_fails_cleanly():
    obj = _good()
    obj[0][3][1][1] = "None"                             # factors not a list
    with pytest.raises(ScheduleError, match=r"trace instruction 3 \(Split\): split: factors of loop 'i'"):
        Trace.apply_json_to_schedule(obj, schedule(gemm()))
    obj = _good()
    obj[0][2][2][0] = '"two"'                            # n is a string
    with pytest.raises(ScheduleError, match=r"trace instruction 2 \(SamplePerfectTile\).*n must be an int"):
        Trace.apply_json_to_schedule(obj, schedule(gemm()))
    obj = _good()
    obj[0][1][1] = ["l1"]                                # GetLoops given a loop
    with pytest.raises(TesseraError, match=r"instruction 1 \(GetLoops\): inputs\[0\] refers to 'l1'"):
        Trace.apply_json_to_schedule(obj, schedule(gemm()))
    obj = _good()
    obj[0][8][1] = ["b0"]                                # parallel on a block
    with pytest.raises(ScheduleError, match=r"trace instruction 8 \(Parallel\): parallel: expected a LoopRV"):
        Trace.apply_json_to_schedule(obj, schedule(gemm()))


def _mutations(obj, draw):
    """Random structural damage: replace one leaf or list anywhere by a random JSON value."""
    paths = []

    def walk(x, path):
        paths.append(path)
        if isinstance(x, list):
            for i, y in enumerate(x):
                walk(y, path + [i])

    walk(obj, [])
    path = draw(st.sampled_from(paths[1:]))
    value = draw(st.one_of(st.none(), st.booleans(), st.integers(-3, 200), st.floats(allow_nan=False),
                           st.text(max_size=4), st.sampled_from(["l1", "b0", "v4", "l99", '"C"', "None", "True"]),
                           st.lists(st.integers(0, 64), max_size=3), st.dictionaries(st.text(max_size=2),
                                                                                        st.integers(), max_size=1)))
    target = obj
    for p in path[:-1]:
        target = target[p]
    target[path[-1]] = value
    return obj


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_randomly_damaged_json_never_raises_anything_but_tessera_errors(data):
    obj = _mutations(copy.deepcopy(GOOD_JSON), data.draw)
    sch = tir.Schedule(gemm())
    try:
        Trace.apply_json_to_schedule(obj, sch)
    except TesseraError:
        pass


GOOD_JSON = json.loads(json.dumps(tiled(seed=8).trace.as_json()))
