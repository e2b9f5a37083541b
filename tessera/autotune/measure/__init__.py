"""Measurement: candidates built in worker processes, checked against the untuned program and timed
in C in a separate process (LocalBuilder, LocalRunner, measure), or on a Dask pool of devices
(DaskRunner; `distributed` is imported only when one is made)."""
from .builder import LocalBuilder
from .candidate import BuildResult, MeasureCandidate, MeasureResult, make_record
from .dask import DaskRunner
from .runner import LocalRunner, measure

__all__ = ["LocalBuilder", "LocalRunner", "DaskRunner", "MeasureCandidate", "MeasureResult", "BuildResult",
           "make_record", "measure"]
