"""Progress of long work (tessera.progress): silent for the first seconds, then the steps with their
counts (plain lines off a terminal, rich on one), tallies from the C compiler driver (from cache or
compiled), tessera.compile's `progress` argument, the command line's lines and --quiet."""
import io
import threading
import time

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper

import tessera
from tessera import progress
from tessera.cli import main
from tessera.graph import Builder


class _Tty(io.StringIO):
    def isatty(self):
        return True


def _lines(stream) -> list:
    return stream.getvalue().splitlines()


def test_plain_lines_name_each_step_its_count_and_tallies():
    out = io.StringIO()
    with progress.Reporter(show=True, stream=out, delay=0, interval=0):
        with progress.stage("optimizing the graph", detail="3 nodes"):
            pass
        with progress.stage("building kernels", total=3) as st:
            for what in ("from cache", "compiled", "compiled"):
                progress.tally(what)
                st.advance()
    lines = _lines(out)
    assert lines[0] == "tessera: optimizing the graph (3 nodes)..."
    assert lines[1] == "tessera: building kernels..."
    assert "tessera: building kernels: 2/3 (1 from cache, 1 compiled)" in lines
    assert lines[-1].startswith("tessera: building kernels: 3/3 (1 from cache, 2 compiled), ") and lines[-1].endswith(" s")


def test_short_work_says_nothing():
    out = io.StringIO()
    with progress.Reporter(show=True, stream=out, delay=30):
        with progress.stage("optimizing the graph"):
            pass
        with progress.stage("building kernels", total=2) as st:
            st.advance(2)
    assert out.getvalue() == ""


def test_a_long_step_is_named_once_the_delay_has_passed_without_any_event():
    """The Reporter looks by itself: a step that began before the delay (one long C compile, no event
    meanwhile) is named as soon as the delay passes."""
    out = io.StringIO()
    with progress.Reporter(show=True, stream=out, delay=0.2):
        with progress.stage("compiling the library", detail="28 kernels in one C file"):
            time.sleep(0.6)
            assert _lines(out) == ["tessera: compiling the library (28 kernels in one C file)..."]


def test_inner_steps_are_named_with_their_outer_one_and_short_inner_steps_not_at_all():
    out = io.StringIO()
    with progress.Reporter(show=True, stream=out, delay=0, interval=30):
        with progress.stage("optimizing the graph", detail="70 nodes"):
            with progress.stage("building kernels", total=1) as st:     # a constant folded: quick
                st.advance()
            with progress.stage("building kernels", total=1) as st:
                time.sleep(0.8)
                st.advance()
    lines = _lines(out)
    assert lines[0] == "tessera: optimizing the graph (70 nodes)..."
    assert lines[1] == "tessera: optimizing the graph > building kernels..."
    assert lines[2].startswith("tessera: optimizing the graph > building kernels: 1/1, ")
    assert len(lines) == 3, lines


@pytest.mark.parametrize("show, tty", [(False, True), (False, False), (None, False)])
def test_silent_reporters(show, tty):
    out = _Tty() if tty else io.StringIO()
    with progress.Reporter(show=show, stream=out, delay=0):
        with progress.stage("building kernels", total=1) as st:
            st.advance()
    assert out.getvalue() == ""


def test_rich_draws_on_a_terminal_and_erases_its_line_when_the_work_ends():
    pytest.importorskip("rich")
    out = _Tty()
    with progress.Reporter(show=None, stream=out, delay=0) as r:
        assert r.mode == "rich"
        with progress.stage("building kernels", total=4) as st:
            progress.tally("compiled")
            st.advance()
            time.sleep(0.3)
    text = out.getvalue()
    assert "building kernels" in text and "1/4 (1 compiled)" in text
    assert "\x1b[2K" in text          # the live line erased (transient)


def test_without_a_reporter_steps_cost_nothing_and_say_nothing(capsys):
    assert progress.active() is None
    with progress.stage("building kernels", total=2) as st:
        st.advance()
        progress.tally("compiled")
    assert st is progress._NULL and st.done == 0 and st.tallies == {}   # one shared inert step: no object per call
    assert capsys.readouterr() == ("", "")


def test_ctrl_c_inside_a_step_leaves_no_reporter_or_thread_behind():
    out = io.StringIO()
    before = threading.active_count()
    with pytest.raises(KeyboardInterrupt):
        with progress.Reporter(show=True, stream=out, delay=0):
            with progress.stage("building kernels", total=3):
                raise KeyboardInterrupt
    assert progress.active() is None
    assert threading.active_count() == before


def _graph(n=24, seed=0):
    b = Builder(f"progress_{n}_{seed}")
    x = b.input("x", (4, n))
    w = b.const(np.random.default_rng(seed).standard_normal((n, n)).astype("float32"), "w")
    b.output(b.op("nn.relu", b.op("nn.matmul", x, w)))
    return b.finish()


def test_compile_reports_its_steps_to_a_callback_with_the_c_compilers_tallies(tmp_path, monkeypatch):
    """tessera.compile(progress=f): f gets every step (optimizing, preparing kernels i/M, building
    kernels with what came from the compiler cache, compiling the library) and prints nothing."""
    monkeypatch.setenv("TESSERA_CACHE_DIR", str(tmp_path / "cache"))
    events = []
    tessera.compile(_graph(40, 1), executor="graph", progress=events.append)
    paths = {e.path[-1] for e in events}
    assert {"optimizing the graph", "preparing kernels", "building kernels"} <= paths
    built = [e for e in events if e.kind == "end" and e.path[-1] == "building kernels"]
    assert built and built[-1].done == built[-1].total >= 1 and built[-1].tallies == {"compiled": built[-1].total}
    prepared = [e for e in events if e.kind == "end" and e.path[-1] == "preparing kernels"][-1]
    assert prepared.done == prepared.total == 1          # one request per node (matmul and relu fused)

    again = []
    tessera.compile(_graph(40, 1), executor="aot", progress=again.append)
    lib = [e for e in again if e.kind == "end" and e.path[-1] == "compiling the library"]
    assert lib and lib[0].tallies == {"compiled": 1}
    third = []
    tessera.compile(_graph(40, 1), executor="aot", progress=third.append)
    assert [e.tallies for e in third if e.kind == "end" and e.path[-1] == "compiling the library"] == \
        [{"from cache": 1}]


def test_compile_says_nothing_by_default_off_a_terminal_and_plain_lines_when_asked(capsys, monkeypatch):
    monkeypatch.setattr(progress, "DELAY_S", 0.0)
    tessera.compile(_graph(16, 2))
    assert capsys.readouterr().err == ""                 # stderr is not a terminal here
    tessera.compile(_graph(16, 3), progress=True)
    err = capsys.readouterr().err
    assert "tessera: optimizing the graph (2 nodes, opt level 3)..." in err
    assert "tessera: preparing kernels" in err
    tessera.compile(_graph(16, 4), progress=False)
    assert capsys.readouterr().err == ""


def test_compile_refuses_a_progress_that_is_not_a_flag_or_a_function():
    with pytest.raises(tessera.TesseraError, match="progress must be"):
        tessera.compile(_graph(8), progress="yes")


def _onnx_model(path):
    m = helper.make_model(helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"])], "mm",
        [helper.make_tensor_value_info("x", TP.FLOAT, [2, 8])], [helper.make_tensor_value_info("y", TP.FLOAT, None)],
        [helper.make_tensor("w", TP.FLOAT, [8, 8], np.eye(8, dtype=np.float32).ravel())]),
        opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(m, path)
    return str(path)


def test_cli_compile_prints_its_steps_on_stderr_and_quiet_silences_them(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(progress, "DELAY_S", 0.0)
    model = _onnx_model(tmp_path / "mm.onnx")
    assert main(["compile", model, "-o", str(tmp_path / "a.so")]) == 0
    out, err = capsys.readouterr()
    assert "compiled " in out and "tessera:" not in out           # stdout: the result only
    lines = err.splitlines()
    assert lines[0] == f"tessera: converting {model} from ONNX..."
    assert "tessera: optimizing the graph (2 nodes, opt level 3)..." in lines
    assert any(ln.startswith("tessera: compiling the library") for ln in lines)
    assert lines[-1] == f"tessera: writing {tmp_path / 'a.so'}..."
    assert main(["compile", model, "-o", str(tmp_path / "b.so"), "--quiet"]) == 0
    assert capsys.readouterr().err == ""


def test_cli_bench_and_demo_take_quiet(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(progress, "DELAY_S", 0.0)
    model = _onnx_model(tmp_path / "mm.onnx")
    assert main(["bench", model, "--repeat", "2", "--warmup", "1", "--number", "1", "-q"]) == 0
    assert "tessera: " not in capsys.readouterr().err
    assert main(["demo", "--size", "32", "--quiet"]) == 0
    assert "tessera: " not in capsys.readouterr().err


def test_the_package_face_names_the_module():
    assert tessera.progress is progress and tessera.progress.ProgressEvent is progress.ProgressEvent
