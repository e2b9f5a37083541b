"""Registers the private ONNX test converters (onnx_test_converters.py) once."""
import importlib.util
import pathlib
import sys

if "tessera_test_onnx_converters" not in sys.modules:
    _spec = importlib.util.spec_from_file_location("tessera_test_onnx_converters",
                                                   pathlib.Path(__file__).with_name("onnx_test_converters.py"))
    _mod = importlib.util.module_from_spec(_spec)
    sys.modules["tessera_test_onnx_converters"] = _mod
    _spec.loader.exec_module(_mod)
