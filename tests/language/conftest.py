"""tests/language: the op kernels (op_kernels.py) and the reference executors of lowered programs
(tests/tir/interp_lowered.py, tests/gpu/gpu_interp.py: a work-group executor that reports data
races) are importable by the tests here."""
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)
sys.path.insert(0, os.path.join(os.path.dirname(_HERE), "gpu"))
sys.path.insert(0, os.path.join(os.path.dirname(_HERE), "tir"))
