"""Makes the helpers of this folder (gpu_interp) and the lowered-IR interpreter of tests/tir
importable by the GPU tests."""
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)
sys.path.insert(0, os.path.join(os.path.dirname(_HERE), "tir"))
