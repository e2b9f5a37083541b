"""The `primitive` decorator other primitive families are written with: method + instruction kind,
recorded only on success, all-or-nothing on failure, nested primitives not recorded."""
import json

import pytest

from tessera.errors import ScheduleError, TesseraError
from tessera.ir import Var, structural_equal
from tessera.tir.schedule import INSTRUCTION_KINDS, LoopRV, Schedule, Trace, primitive
from tessera.tir.schedule.rewrite import LoopRewriter

from schedule_helpers import check_gemm, gemm, schedule


@primitive("TestOnlyMarkUnrolled", inputs=("loop",), outputs="one", output_type=LoopRV)
def mark_unrolled_for_tests(self, loop, fail=False):
    """Renames the loop (a new Var) and unrolls it, retires the old handle, then (maybe) fails."""
    fname, idx, node = self._loop(loop, "mark_unrolled_for_tests")
    var = Var(node.loop_var.name + "_r", node.loop_var.dtype)
    rw = LoopRewriter(idx, node)
    rw.bind_loop(var, node.min, node.extent)
    body = rw.rewrite(node.body, {node.loop_var: var})
    self._replace(fname, {node: node.replace(loop_var=var, body=body, kind="unrolled")})
    self._retire_loop(fname, node.loop_var, "it was renamed for a test")
    rv = self._new_loop_rv(fname, var)
    if fail:
        raise ScheduleError("mark_unrolled_for_tests: failing after the commit")
    return rv


@primitive("TestOnlySplitParallel", inputs=("loop",), outputs="list", output_type=LoopRV)
def split_parallel_for_tests(self, loop, factor, fail=False):
    """A primitive made of other primitives."""
    outer, inner = self.split(loop, [None, factor])
    self.parallel(outer)
    if fail:
        raise ScheduleError("split_parallel_for_tests: failing after two inner primitives")
    return [outer, inner]


def test_decorator_registers_method_and_kind():
    kind = INSTRUCTION_KINDS["TestOnlySplitParallel"]
    assert Schedule.split_parallel_for_tests.instruction_kind is kind
    assert kind.inputs == ("loop",) and kind.attrs == ("factor", "fail") and kind.outputs == "list"
    assert Schedule.split_parallel_for_tests.__doc__.startswith("A primitive made of")
    with pytest.raises(TesseraError, match="registered twice"):
        primitive("TestOnlySplitParallel")(lambda self: None)
    with pytest.raises(TesseraError, match="already exists"):
        @primitive("TestOnlyOther")
        def split(self):  # noqa: F811 - clashes with Schedule.split on purpose
            return None


def test_failure_after_commit_restores_everything():
    sch = schedule(gemm())
    i, j, k = sch.get_loops(sch.get_block("C"))
    func, text = sch.mod["main"], str(sch.trace)
    with pytest.raises(ScheduleError, match="failing after the commit"):
        sch.mark_unrolled_for_tests(i, fail=True)
    assert sch.mod["main"] is func and str(sch.trace) == text
    assert sch.get(i).kind == "serial"                         # the retirement was undone
    new = sch.mark_unrolled_for_tests(i)
    assert str(sch.trace).splitlines()[-1] == "  l4 = sch.mark_unrolled_for_tests(loop=l1, fail=False)"
    with pytest.raises(ScheduleError, match="loop 'i' is no longer valid: it was renamed for a test"):
        sch.get(i)
    assert sch.get(new).loop_var.name == "i_r" and sch.get(new).kind == "unrolled"
    check_gemm(sch)


def test_nested_primitives_are_not_recorded_and_fail_atomically():
    sch = schedule(gemm())
    i, j, k = sch.get_loops(sch.get_block("C"))
    func, n = sch.mod["main"], len(sch.trace)
    with pytest.raises(ScheduleError, match="failing after two inner primitives"):
        sch.split_parallel_for_tests(i, 8, fail=True)
    assert sch.mod["main"] is func and len(sch.trace) == n and sch.get(i).loop_var.name == "i"
    outer, inner = sch.split_parallel_for_tests(i, factor=8)
    assert [inst.kind.name for inst in sch.trace.insts] == ["GetBlock", "GetLoops", "TestOnlySplitParallel"]
    assert sch.get(outer).kind == "parallel" and sch.get(inner).extent.value == 8
    assert str(sch.trace).splitlines()[-1] == \
        "  l4, l5 = sch.split_parallel_for_tests(loop=l1, factor=8, fail=False)"
    obj = json.loads(json.dumps(sch.trace.as_json()))
    fresh = schedule(gemm())
    Trace.apply_json_to_schedule(obj, fresh)
    assert structural_equal(fresh.mod, sch.mod)
    check_gemm(sch)


def test_wrong_call_is_a_tessera_error():
    sch = schedule(gemm())
    with pytest.raises(TesseraError, match="split: missing a required argument: 'factors'"):
        sch.split(sch.get_loops(sch.get_block("C"))[0])
    with pytest.raises(TesseraError, match="split: got an unexpected keyword argument 'factor'"):
        sch.split(sch.get_loops(sch.get_block("C"))[0], [None, 4], factor=4)
