"""`tessera quantize MODEL --calib DIR -o OUT.onnx` (through tessera.cli.main): a QDQ ONNX model that
ONNX Runtime loads, from a one-input model calibrated on .npy files and a several-input model on .npz
files; a zoo name; and the refusals of a calibration folder, each naming the folder or the file."""
import sys
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

import tessera  # noqa: E402
from onnx import TensorProto as TP  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402
from tessera.cli import main  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from int8 import SMALL, _feeds  # noqa: E402  (the benchmark's small zoo options and seeded inputs)

RNG = np.random.default_rng(3)


def tiny_cnn(extra_nodes=(), output="logits"):
    """image float32[1, 3, 8, 8] -> Conv(+bias) -> Relu -> GlobalAveragePool -> Flatten -> Gemm -> logits."""
    w = numpy_helper.from_array((RNG.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float32), "conv.weight")
    b = numpy_helper.from_array((RNG.standard_normal(8) * 0.1).astype(np.float32), "conv.bias")
    fw = numpy_helper.from_array((RNG.standard_normal((4, 8)) * 0.3).astype(np.float32), "fc.weight")
    fb = numpy_helper.from_array((RNG.standard_normal(4) * 0.1).astype(np.float32), "fc.bias")
    nodes = [helper.make_node("Conv", ["image", "conv.weight", "conv.bias"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("GlobalAveragePool", ["r"], ["p"], name="pool"),
             helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
             helper.make_node("Gemm", ["f", "fc.weight", "fc.bias"], ["logits"], transB=1, name="fc")]
    nodes += list(extra_nodes)
    g = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("image", TP.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info(output, TP.FLOAT, None)], initializer=[w, b, fw, fb])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(scope="module")
def cnn(tmp_path_factory):
    d = tmp_path_factory.mktemp("quantize_cli")
    onnx.save(tiny_cnn(), d / "tiny.onnx")
    calib = d / "calib"
    calib.mkdir()
    for k in range(4):
        np.save(calib / f"image_{k}.npy", RNG.standard_normal((1, 3, 8, 8)).astype(np.float32))
    return d, d / "tiny.onnx", calib


def run_ort(path, feeds):
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)


def test_writes_a_qdq_model_that_onnxruntime_runs(cnn, capsys):
    d, model, calib = cnn
    out = d / "tiny_int8.onnx"
    assert main(["quantize", str(model), "--calib", str(calib), "-o", str(out), "--quiet"]) == 0
    text = capsys.readouterr().out
    assert f"wrote {out}" in text and "on 4 calibration samples" in text
    m = onnx.load(out)
    onnx.checker.check_model(m, full_check=True)
    assert [i.name for i in m.graph.input] == ["image"] and [o.name for o in m.graph.output] == ["logits"]
    kinds = {n.op_type for n in m.graph.node}
    assert {"QuantizeLinear", "DequantizeLinear", "Conv", "Gemm"} <= kinds
    x = RNG.standard_normal((1, 3, 8, 8)).astype(np.float32)
    got = run_ort(out, {"image": x})[0]
    ref = run_ort(model, {"image": x})[0]
    # int8 through two quantized layers: within a few per cent of the output's range
    assert got.shape == ref.shape and np.abs(got - ref).max() <= 0.05 * (np.abs(ref).max() + 1e-6)


def test_options_reach_the_quantizer(cnn, capsys):
    d, model, calib = cnn
    out = d / "per_tensor.onnx"
    assert main(["quantize", str(model), "--calib", str(calib), "-o", str(out), "--quiet", "--method",
                 "percentile", "--percentile", "99.9", "--no-per-channel", "--skip", "fc"]) == 0
    m = onnx.load(out)
    inits = {t.name: t for t in m.graph.initializer}
    scales = [inits[n.input[1]] for n in m.graph.node if n.op_type == "DequantizeLinear" and n.input[0] in inits
              and inits[n.input[0]].data_type == TP.INT8]
    assert len(scales) == 1 and list(scales[0].dims) == []            # the conv's weight only, one scale
    gemm = [n for n in m.graph.node if n.op_type == "Gemm"][0]
    assert gemm.input[1] in inits and inits[gemm.input[1]].data_type == TP.FLOAT   # fc left in float
    assert run_ort(out, {"image": np.zeros((1, 3, 8, 8), np.float32)})[0].shape == (1, 4)


def test_several_inputs_calibrate_on_npz_samples(tmp_path, capsys):
    opts = SMALL["bert_base"]
    model = tmp_path / "bert.onnx"
    onnx.save(tessera.zoo.get_model("bert_base", **opts), model)
    calib = tmp_path / "calib"
    calib.mkdir()
    for k in range(3):
        np.savez(calib / f"sample_{k}.npz", **_feeds("bert_base", opts, k))
    out = tmp_path / "bert_int8.onnx"
    assert main(["quantize", str(model), "--calib", str(calib), "-o", str(out), "--quiet"]) == 0
    feeds = _feeds("bert_base", opts, 11)
    got = run_ort(out, feeds)
    assert [o.shape for o in got] == [o.shape for o in run_ort(model, feeds)]
    m = onnx.load(out)
    assert [i.name for i in m.graph.input] == list(feeds)


def expect_error(capsys, argv, *words):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("tessera: error: "), err
    for w in words:
        assert w in err, (w, err)
    return err


def test_bad_calibration_folders_are_refused_naming_the_file(cnn, tmp_path, capsys):
    d, model, _ = cnn
    base = ["quantize", str(model), "-o", str(tmp_path / "out.onnx"), "--calib"]
    expect_error(capsys, base + [str(tmp_path / "nowhere")], "nowhere", "no such folder")
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "notes.txt").write_text("no arrays here")
    expect_error(capsys, base + [str(empty)], "holds no .npy or .npz files")

    def folder(name, **files):
        f = tmp_path / name
        f.mkdir()
        for fname, arr in files.items():
            if fname.endswith("_npz"):
                np.savez(f / (fname[:-4] + ".npz"), **arr)
            else:
                np.save(f / (fname + ".npy"), arr)
        return str(f)

    ok = np.zeros((1, 3, 8, 8), np.float32)
    expect_error(capsys, base + [folder("f64", a=ok, b=ok.astype(np.float64))], "b.npy",
                 "expects float32[1, 3, 8, 8]", "float64[1, 3, 8, 8]")
    expect_error(capsys, base + [folder("shape", a=np.zeros((1, 3, 9, 8), np.float32))], "a.npy",
                 "float32[1, 3, 9, 8]")
    expect_error(capsys, base + [folder("names", s_npz={"img": ok})], "s.npz", "['img'] are not inputs", "image")
    expect_error(capsys, base + [folder("mixed", a=ok, s_npz={"image": ok})], "mixes .npy and .npz")
    junk = tmp_path / "junk"
    junk.mkdir()
    (junk / "x.npy").write_bytes(b"raw float bytes, not an array")
    expect_error(capsys, base + [str(junk)], "x.npy", "not a .npy array")
    (junk / "x.npy").unlink()
    (junk / "y.npz").write_bytes(b"not a zip")
    expect_error(capsys, base + [str(junk)], "y.npz", "cannot read calibration file")
    # pickles are never loaded: an object array in a .npy file or in a .npz archive is refused
    (junk / "y.npz").unlink()
    np.save(junk / "p.npy", np.array([{"image": ok}], dtype=object), allow_pickle=True)
    expect_error(capsys, base + [str(junk)], "p.npy", "cannot read", "pickle")
    (junk / "p.npy").unlink()
    np.savez(junk / "p.npz", image=np.array([ok, None], dtype=object))
    expect_error(capsys, base + [str(junk)], "p.npz", "cannot read calibration file", "pickle")
    # a .npy file named .npz: refused as not an archive, not a crash
    (junk / "p.npz").unlink()
    np.save(junk / "one.npy", ok)
    (junk / "one.npy").rename(junk / "one.npz")
    expect_error(capsys, base + [str(junk)], "one.npz", "one .npy array, not a .npz archive")


def test_an_npz_member_is_checked_by_its_header_before_it_is_decompressed(cnn, tmp_path, capsys):
    """An archive member whose header says 4 GiB of float32 (and holds a few bytes) is refused by its
    shape: nothing past the header is read, where np.load would first try to read the whole array."""
    import io
    import zipfile

    d, model, _ = cnn
    folder = tmp_path / "bomb"
    folder.mkdir()
    head = io.BytesIO()
    np.lib.format.write_array_header_1_0(head, {"descr": "<f4", "fortran_order": False, "shape": (1024, 3, 512, 683)})
    with zipfile.ZipFile(folder / "s.npz", "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("image.npy", head.getvalue() + b"\x00" * 64)
    expect_error(capsys, ["quantize", str(model), "-o", str(tmp_path / "out.onnx"), "--calib", str(folder)],
                 "s.npz", "expects float32[1, 3, 8, 8]", "float32[1024, 3, 512, 683]")


def test_several_inputs_refuse_npy_files_and_missing_inputs(tmp_path, capsys):
    opts = SMALL["bert_base"]
    model = tmp_path / "bert.onnx"
    onnx.save(tessera.zoo.get_model("bert_base", **opts), model)
    feeds = _feeds("bert_base", opts, 0)
    npy = tmp_path / "npy"
    npy.mkdir()
    np.save(npy / "input_ids.npy", feeds["input_ids"])
    base = ["quantize", str(model), "-o", str(tmp_path / "out.onnx"), "--calib"]
    expect_error(capsys, base + [str(npy)], "input_ids.npy", "takes 3 inputs", ".npz")
    npz = tmp_path / "npz"
    npz.mkdir()
    np.savez(npz / "s0.npz", input_ids=feeds["input_ids"])
    expect_error(capsys, base + [str(npz)], "s0.npz", "lacks", "attention_mask")


def test_zoo_names_and_other_refusals(cnn, tmp_path, capsys):
    d, model, calib = cnn
    # a zoo name: its inputs (1, 3, 224, 224) decide what the calibration files must hold
    expect_error(capsys, ["quantize", "resnet18", "--calib", str(calib)], "image_0.npy",
                 "input 'input' expects float32[1, 3, 224, 224]")
    expect_error(capsys, ["quantize", str(model), "--calib", str(calib), "--percentile", "99"],
                 "--percentile applies to --method percentile")
    expect_error(capsys, ["quantize", str(model), "--calib", str(calib), "-o", str(model)], "is the model itself")
    expect_error(capsys, ["quantize", str(d / "missing.onnx"), "--calib", str(calib)], "no such file")
    # an op the ONNX export does not write: named with its node
    topk = [helper.make_node("TopK", ["logits", "k"], ["best", "idx"], name="best_two")]
    m = tiny_cnn(topk, output="best")
    m.graph.initializer.append(numpy_helper.from_array(np.array([2], np.int64), "k"))
    onnx.save(m, tmp_path / "topk.onnx")
    expect_error(capsys, ["quantize", str(tmp_path / "topk.onnx"), "--calib", str(calib), "-o",
                          str(tmp_path / "t.onnx"), "--quiet"], "unsupported op 'topk'", "best_two")


def test_an_npz_array_stored_twice_is_refused(cnn, tmp_path, capsys):
    """An archive holding both 'image.npy' (right) and 'image' (any other array): the header checked
    and the data read must be one member, so the archive is refused instead of one being read unchecked."""
    import io
    import zipfile

    d, model, _ = cnn
    folder = tmp_path / "twice"
    folder.mkdir()

    def npy(arr):
        buf = io.BytesIO()
        np.save(buf, arr)
        return buf.getvalue()

    with zipfile.ZipFile(folder / "s.npz", "w") as z:
        z.writestr("image.npy", npy(np.zeros((1, 3, 8, 8), np.float32)))
        z.writestr("image", npy(np.zeros((2, 3, 8, 8), np.float64)))
    expect_error(capsys, ["quantize", str(model), "-o", str(tmp_path / "out.onnx"), "--calib", str(folder)],
                 "s.npz", "stored 2 times")
