"""The nn op tests use the op-test helpers one folder up (op_check, nn_onnx_ref)."""
import pathlib
import sys

_OPS = str(pathlib.Path(__file__).resolve().parent.parent)
if _OPS not in sys.path:
    sys.path.insert(0, _OPS)
