"""Code generation: a lowered PrimFunc becomes source for a backend (C for CPUs)."""
from .. import abi   # (the calling convention lives below codegen and the runtime: tessera/abi.py)
from .c import CodeGenC, generate, generate_module
from .c_base import CodeGenCBase, HelperRegistry, NameTable

__all__ = ["abi", "generate", "generate_module", "CodeGenC", "CodeGenCBase", "HelperRegistry",
           "NameTable"]
