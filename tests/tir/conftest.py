"""Makes the helpers of this folder (interp_lowered) importable by its tests."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
