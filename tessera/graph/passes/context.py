"""PassContext: what a graph pass may need besides the graph (the target it compiles for, the opt
level), so that every pass has one signature, `pass(graph, ctx) -> Graph`."""
from __future__ import annotations

from dataclasses import dataclass

from ...errors import TesseraError
from ...target import Target


@dataclass(frozen=True)
class PassContext:
    """The target the graph is optimized for and the opt_level of the pipeline running the pass."""

    target: Target
    opt_level: int = 3

    @staticmethod
    def of(ctx) -> "PassContext":
        """A PassContext from what a caller passes: a PassContext, a target (text or Target), or None
        (the host)."""
        if isinstance(ctx, PassContext):
            return ctx
        if ctx is None:
            return PassContext(Target.host())
        if isinstance(ctx, (str, Target)):
            return PassContext(Target(ctx))
        raise TesseraError(f"a graph pass takes a PassContext or a target as its context, got {type(ctx).__name__}")


__all__ = ["PassContext"]
