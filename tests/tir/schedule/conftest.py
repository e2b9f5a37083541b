"""Makes the helpers of this folder (schedule_helpers) and of tests/tir (interp_lowered) importable."""
import os
import sys

_here = os.path.dirname(os.path.abspath(__file__))
for _p in (_here, os.path.dirname(_here)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
