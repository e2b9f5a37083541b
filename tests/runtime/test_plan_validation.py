"""An exported library's tessera_graph document is data, not trusted: the memory layout, the weights'
size and what the model entry points take are checked against the plan itself and against the
library's own compiled symbols before the first run (runtime/plan.py check_memory,
runtime/library.py embedded_weights, runtime/aot_executor.py check_entry_record). Each test edits
the JSON inside an exported library, as anyone holding the file could, and loads the copy."""
import json

import numpy as np
import pytest

import tessera
from tessera.errors import TesseraError
from tessera.graph import Builder
from tessera.runtime import load_module

RNG = np.random.default_rng(11)
W = RNG.standard_normal((16, 32)).astype(np.float32)
MARK = b'{"format":"tessera-graph"'


def _graph():
    """x @ W -> relu -> negative: two intermediates alive at once (the relu reads one, writes the other)."""
    gb = Builder("tamper")
    x = gb.input("x", (4, 16))
    w = gb.const(W, "w")
    gb.output(gb.op("negative", gb.op("nn.relu", gb.op("nn.matmul", x, w))))
    return gb.finish()


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    exe = tessera.compile(_graph(), opt_level=0)
    return exe.export_library(tmp_path_factory.mktemp("lib") / "model.so")


def _expected(x):
    return -np.maximum(x @ W, 0)


def _document(data: bytes) -> tuple:
    start = data.index(MARK)
    end = data.index(b"\0", start)
    return start, end, json.loads(data[start:end])


def _tampered(path, tmp_path, edit) -> str:
    """A copy of the library whose tessera_graph `edit(doc)` changed, at the same length (padded with
    spaces, which JSON allows, or the descriptive header text cut), so the library's layout is untouched."""
    data = open(path, "rb").read()
    start, end, doc = _document(data)
    edit(doc)
    text = json.dumps(doc, separators=(",", ":")).encode()
    if len(text) > end - start:
        doc["aot"]["header"] = doc["aot"]["header"][:-(len(text) - (end - start))]
        text = json.dumps(doc, separators=(",", ":")).encode()
    out = tmp_path / "tampered.so"
    out.write_bytes(data[:start] + text.ljust(end - start) + data[end:])
    return str(out)


def _first_offset(doc):
    return doc["memory"]["offsets"][0]


def test_an_untouched_library_runs_on_both_executors(library):
    x = RNG.standard_normal((4, 16)).astype(np.float32)
    for executor in (None, "graph"):
        exe = load_module(library, executor=executor)
        np.testing.assert_allclose(exe(x), _expected(x), rtol=1e-5, atol=1e-5)
    assert load_module(library, executor="graph").static_runner()   # the checked layout is the one it runs


def test_a_shrunk_arena_is_refused(library, tmp_path):
    def edit(doc):
        doc["memory"]["arena_bytes"] = 64
    bad = _tampered(library, tmp_path, edit)
    for executor in (None, "graph"):
        with pytest.raises(TesseraError, match="memory.arena_bytes = 64"):
            load_module(bad, executor=executor)


def test_an_oversized_arena_is_refused(library, tmp_path):
    def edit(doc):
        doc["memory"]["arena_bytes"] = 1 << 60
    with pytest.raises(TesseraError, match=f"memory.arena_bytes is {1 << 60}, but its tensors end at byte"):
        load_module(_tampered(library, tmp_path, edit), executor="graph")


@pytest.mark.parametrize("offset, message", [
    (-64, "offset -64 is not a non-negative multiple of the alignment 64"),
    (4, "offset 4 is not a non-negative multiple of the alignment 64"),
    (1 << 40, f"bytes \\[{1 << 40}, .* lie outside the arena"),
])
def test_an_offset_outside_the_arena_or_misaligned_is_refused(library, tmp_path, offset, message):
    def edit(doc):
        _first_offset(doc)[1] = offset
    with pytest.raises(TesseraError, match=message):
        load_module(_tampered(library, tmp_path, edit), executor="graph")


def test_a_recorded_size_other_than_the_tensors_is_refused(library, tmp_path):
    def edit(doc):
        _first_offset(doc)[2] = 4
    with pytest.raises(TesseraError, match="nbytes 4, but the tensor \\(float32\\[4, 32\\]\\) takes 512 bytes"):
        load_module(_tampered(library, tmp_path, edit), executor="graph")


def test_tensors_alive_at_once_may_not_share_bytes(library, tmp_path):
    def edit(doc):
        m = doc["memory"]
        for t in m["offsets"]:
            t[1] = 0
        m["arena_bytes"] = max(t[2] for t in m["offsets"])
    with pytest.raises(TesseraError, match="overlaps .* alive at the same time"):
        load_module(_tampered(library, tmp_path, edit), executor="graph")


def test_a_kernel_writing_more_than_its_output_slot_is_refused(library, tmp_path):
    def edit(doc):                     # the matmul's kernel says it writes 8 rows into a 4-row slot
        k = doc["nodes"][0]["kernel"]
        doc["kernels"][k]["out_shapes"] = [[8, 32]]
    with pytest.raises(TesseraError, match="writes outputs of shapes \\[\\[8, 32\\]\\]"):
        load_module(_tampered(library, tmp_path, edit), executor="graph")


def test_raised_weights_nbytes_is_refused(library, tmp_path):
    size = W.nbytes

    def edit(doc):
        doc["weights"]["nbytes"] = size + 4096
        doc["constants"][0]["shape"] = [16, 32 + 64]    # a constant reaching past the real weights
    with pytest.raises(TesseraError, match=f"weights.nbytes is {size + 4096}, but the library embeds {size} bytes"):
        load_module(_tampered(library, tmp_path, edit), executor="graph")


def test_a_workspace_other_than_the_librarys_is_refused(library, tmp_path):
    arena = _document(open(library, "rb").read())[2]["aot"]["workspace_bytes"]

    def edit(doc):
        doc["aot"]["workspace_bytes"] = 64
    with pytest.raises(TesseraError, match=f"aot.workspace_bytes is 64 .* arena is {arena} bytes "
                                           f"\\(tessera_model_workspace_size\\)"):
        load_module(_tampered(library, tmp_path, edit))


def test_an_output_smaller_than_the_entry_writes_is_refused(library, tmp_path):
    def edit(doc):                     # consistent inside the document, but the C entry writes 4 x 32 floats
        out = doc["nodes"][-1]["outputs"][0]
        out["shape"] = [2, 32]
        doc["kernels"][doc["nodes"][-1]["kernel"]]["out_shapes"] = [[2, 32]]
    bad = _tampered(library, tmp_path, edit)
    with pytest.raises(TesseraError, match="output 0 \\('.*'\\) is float32\\[2, 32\\], but the library's entry "
                                           "writes 512 bytes there \\(tessera_model_output_bytes\\[0\\]\\)"):
        load_module(bad)


def test_an_input_smaller_than_the_entry_reads_is_refused(library, tmp_path):
    def edit(doc):
        doc["inputs"][0]["shape"] = [2, 16]
    with pytest.raises(TesseraError, match="input 0 \\('x'\\) is float32\\[2, 16\\], but the library's entry "
                                           "reads 256 bytes there"):
        load_module(_tampered(library, tmp_path, edit), executor="aot")


def test_a_non_integer_offset_is_refused(library, tmp_path):
    def edit(doc):
        _first_offset(doc)[1] = 0.5
    with pytest.raises(TesseraError, match="malformed tessera_graph: memory.offsets offset of id .* is 0.5"):
        load_module(_tampered(library, tmp_path, edit), executor="graph")
