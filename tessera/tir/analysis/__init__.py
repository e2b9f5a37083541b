"""tessera.tir.analysis: what the scheduler (tir/schedule) and the lowering passes (tir/transform) both
ask of a PrimFunc's IR; it imports neither of them, so lowering does not import the scheduler.

- uses.py: whether an expression mentions given variables (`uses_vars`), the buffer accesses of a
  statement (`accesses`);
- affine.py: an index as an integer combination of variables (`linear_form`, `NotAffine`);
- index_bounds.py: the range an index takes while loops run (`relax_range`, `relax`);
- shape_vars.py: an Analyzer that knows a function's symbolic extents are >= 0 (`shape_var_analyzer`);
- edits.py: several statement edits of one function at once (`edit`).
"""
from .affine import NotAffine, linear_form
from .edits import edit
from .index_bounds import relax, relax_range
from .shape_vars import shape_var_analyzer
from .uses import accesses, uses_var, uses_vars

__all__ = ["NotAffine", "linear_form", "edit", "relax", "relax_range", "shape_var_analyzer", "accesses",
           "uses_var", "uses_vars"]
