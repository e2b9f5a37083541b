"""The one error family of tessera: every user-facing failure is a TesseraError."""


class TesseraError(Exception):
    """Base class of every error tessera raises for bad input or a failed step."""


class DTypeError(TesseraError, TypeError):
    """An invalid dtype, or an operation on mismatched dtypes."""


class ShapeError(TesseraError, ValueError):
    """A shape that does not fit: wrong rank, extent or symbolic binding."""


class ScheduleError(TesseraError):
    """A schedule primitive whose preconditions do not hold (names the block/loop and why)."""


class UnsupportedOpError(TesseraError):
    """An operator tessera does not implement; names the op and the node."""

    def __init__(self, op, node=None, detail=""):
        self.op, self.node = op, node
        where = f" (node {node!r})" if node else ""
        super().__init__(f"unsupported op {op!r}{where}" + (f": {detail}" if detail else ""))


class BuildError(TesseraError):
    """The C compiler failed; carries its message and the path of the generated source."""

    def __init__(self, message, source_path=None, compiler_output=""):
        self.source_path, self.compiler_output = source_path, compiler_output
        text = message
        if source_path:
            text += f"\n  source: {source_path}"
        if compiler_output:
            text += "\n  compiler said:\n" + "\n".join("    " + l for l in compiler_output.splitlines()[:40])
        super().__init__(text)
