"""Default GPU schedules (docs/gpu.md): what a program needs before a GPU backend can build it."""
from .auto_bind import auto_bind

__all__ = ["auto_bind"]
