"""The one error family of tessera: every user-facing failure is a TesseraError."""
import collections
import contextlib
import os
import sys


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


class ResourceError(TesseraError):
    """A step ran out of memory, or of Python's recursion depth (an input nested too deeply for a
    recursive pass); names the step and the tessera function it ran out in."""


@contextlib.contextmanager
def resource_errors(what: str, deepest=None):
    """Raise a MemoryError or RecursionError from inside as a ResourceError naming `what` ran, what ran
    out and the tessera function it ran out in (the public entry points use it: build, compile,
    from_onnx, a tuning database's load). deepest: for a RecursionError, a function that says what in
    the input is nested deepest (None: the message says it generally)."""
    try:
        yield
    except MemoryError as e:    # from None: the failed step's frames (and what they hold) are let go
        detail = f" ({e})" if str(e) else ""
        raise ResourceError(f"{what}: ran out of memory{detail}{_ran_out_in(e, False)}") from None
    except RecursionError as e:
        where = _ran_out_in(e, True)
        nested = deepest() if deepest is not None else None
        raise ResourceError(f"{what}: Python's recursion limit ({sys.getrecursionlimit()} frames) was reached"
                            f"{where}: " + (nested or "something in the input is nested too deeply for it (an "
                                            "expression or subgraphs thousands of levels deep)")) from None


def _ran_out_in(e: BaseException, recursion: bool) -> str:
    """' in tessera/x.py (f, line n)': the innermost tessera function of e's traceback; for a
    recursion, the tessera function that recursed most, and how deep."""
    here = os.path.abspath(__file__)
    root = os.path.dirname(here)
    ours = []   # (file, function's qualified name, line) of the tessera frames, outermost first
    tb = e.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        path = os.path.abspath(code.co_filename)
        if path.startswith(root + os.sep) and path != here:
            ours.append((path, getattr(code, "co_qualname", code.co_name), tb.tb_lineno))
        tb = tb.tb_next
    if not ours:
        return ""
    path, name, line = ours[-1]
    where = f"line {line}"
    if recursion:
        (path, name), depth = collections.Counter(f[:2] for f in ours).most_common(1)[0]
        where = f"{depth} calls deep"
    return f" in {os.path.relpath(path, os.path.dirname(root))} ({name}, {where})"
