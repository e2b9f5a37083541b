"""Integer arithmetic analysis: interval bounds, canonical index sums, the simplifier and prover."""
from .analyzer import Analyzer, can_prove, can_prove_equal, simplify
from .bound import INF, NEG_INF, const_int_bound

__all__ = ["Analyzer", "simplify", "can_prove", "can_prove_equal", "const_int_bound", "INF", "NEG_INF"]
