"""The ONNX frontend against hostile or malformed models (issue 27): external data resolved only
against a directory the caller names, limits on unrolled loops and on constants, duplicate tensor
definitions, unknown opsets, overridable initializers, dim_params that sanitize alike; and the
converter registry read once."""
import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

import tessera
from tessera.frontend import onnx_ops
from tessera.frontend.onnx import from_onnx

RNG = np.random.default_rng(27)


def vi(name, dtype=TP.FLOAT, shape=None):
    return helper.make_tensor_value_info(name, dtype, shape)


def model(nodes, inputs, outputs, initializers=(), opset=17, ir_version=None):
    m = helper.make_model(helper.make_graph(nodes, "g", inputs, outputs, list(initializers)),
                          opset_imports=[helper.make_opsetid("", opset)])
    if ir_version is not None:
        m.ir_version = ir_version
    return m


def ort_run(m, feeds):
    return ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


def run(m, feeds, **kw):
    graph, params = from_onnx(m, **kw)
    return tessera.compile(graph, params).run(feeds)


# ---------------------------------------------------------------------------------------------
# the converter registry
# ---------------------------------------------------------------------------------------------
def test_converter_folder_is_scanned_once_not_per_node(monkeypatch):
    m = model([helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Neg", ["a"], ["b"]),
               helper.make_node("Abs", ["b"], ["y"])], [vi("x", shape=[5])], [vi("y", shape=[5])])
    from_onnx(m)
    scans = []
    real = onnx_ops.pkgutil.iter_modules
    monkeypatch.setattr(onnx_ops.pkgutil, "iter_modules", lambda *a, **k: scans.append(a) or real(*a, **k))
    x = RNG.standard_normal(5).astype(np.float32)
    (y,) = run(m, {"x": x})
    assert scans == []
    np.testing.assert_allclose(y, ort_run(m, {"x": x})[0])


# ---------------------------------------------------------------------------------------------
# external data: resolved against the model file's folder or a base_dir the caller names
# ---------------------------------------------------------------------------------------------
W = np.arange(4, dtype=np.float32) + 0.5


def external_model(location, constant=False):
    """y = x + w, w's data in the external file `location` (an initializer, or a Constant's tensor)."""
    w = numpy_helper.from_array(W, "w")
    w.ClearField("raw_data")
    w.data_location = TP.EXTERNAL
    for k, v in (("location", location), ("offset", "0"), ("length", str(W.nbytes))):
        w.external_data.add(key=k, value=v)
    nodes = [helper.make_node("Add", ["x", "w"], ["y"])]
    if constant:
        return model([helper.make_node("Constant", [], ["w"], value=w)] + nodes, [vi("x", shape=[4])],
                     [vi("y", shape=[4])])
    return model(nodes, [vi("x", shape=[4])], [vi("y", shape=[4])], [w])


def test_bytes_model_external_data_never_reads_the_working_directory(tmp_path, monkeypatch):
    (tmp_path / "secret.bin").write_bytes(W.tobytes())
    monkeypatch.chdir(tmp_path)
    for constant in (False, True):
        with pytest.raises(tessera.TesseraError, match="external data.*base_dir"):
            from_onnx(external_model("secret.bin", constant).SerializeToString())


def test_model_proto_without_its_external_data_is_refused(tmp_path, monkeypatch):
    (tmp_path / "secret.bin").write_bytes(W.tobytes())
    monkeypatch.chdir(tmp_path)
    with pytest.raises(tessera.TesseraError, match="'w'.*external data.*base_dir"):
        from_onnx(external_model("secret.bin"))


@pytest.mark.parametrize("constant", [False, True])
def test_external_data_resolves_against_the_named_base_dir(tmp_path, monkeypatch, constant):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "w.bin").write_bytes(W.tobytes())
    m = external_model("w.bin", constant)
    (folder / "m.onnx").write_bytes(m.SerializeToString())
    monkeypatch.chdir(tmp_path)            # not the model's folder
    x = RNG.standard_normal(4).astype(np.float32)
    want = ort.InferenceSession(str(folder / "m.onnx"), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(want, x + W)
    for source in (m.SerializeToString(), m):
        np.testing.assert_array_equal(run(source, {"x": x}, base_dir=folder)[0], want)
    np.testing.assert_array_equal(run(str(folder / "m.onnx"), {"x": x})[0], want)   # a path: its own folder


def test_external_data_outside_the_base_dir_is_refused(tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    (tmp_path / "secret.bin").write_bytes(W.tobytes())
    (folder / "link.bin").symlink_to(tmp_path / "secret.bin")
    (folder / "up").symlink_to(tmp_path)
    for location in ("../secret.bin", str(tmp_path / "secret.bin"), "link.bin", "up/secret.bin"):
        m = external_model(location)
        with pytest.raises(tessera.TesseraError, match="'w'"):
            from_onnx(m.SerializeToString(), base_dir=folder)
        (folder / "m.onnx").write_bytes(m.SerializeToString())
        with pytest.raises(tessera.TesseraError):
            from_onnx(str(folder / "m.onnx"))


def test_base_dir_must_be_a_folder(tmp_path):
    with pytest.raises(tessera.TesseraError, match="base_dir"):
        from_onnx(external_model("w.bin").SerializeToString(), base_dir=tmp_path / "missing")
