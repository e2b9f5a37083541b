"""Makes the reference interpreter importable by the te tests as `te_interp` (a unique module name,
so that helper modules of other test folders cannot shadow it)."""
import importlib.util
import pathlib
import sys

if "te_interp" not in sys.modules:
    _spec = importlib.util.spec_from_file_location("te_interp", pathlib.Path(__file__).with_name("interp.py"))
    _mod = importlib.util.module_from_spec(_spec)
    sys.modules["te_interp"] = _mod
    _spec.loader.exec_module(_mod)
