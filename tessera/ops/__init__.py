"""The operator library ("TOPI"): per graph op a type inference, a tensor expression, a default
schedule and a fusion pattern, registered in `registry`. Op families live one per module and
register on import (this package imports them all).
"""
import importlib as _importlib
import pkgutil as _pkgutil

from .registry import REQUIRED, Knobs, OpDef, OpPattern, ScheduleContext, get_op, list_ops, register_op

for _m in _pkgutil.walk_packages(__path__, prefix=__name__ + "."):
    if _m.name.rsplit(".", 1)[-1] not in ("registry",) and not _m.name.rsplit(".", 1)[-1].startswith("_"):
        _importlib.import_module(_m.name)

__all__ = ["REQUIRED", "Knobs", "OpDef", "OpPattern", "ScheduleContext", "get_op", "list_ops", "register_op"]
