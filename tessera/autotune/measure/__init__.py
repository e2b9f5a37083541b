"""Measurement: candidates built in worker processes, checked against the untuned program and timed
in C in a separate process (LocalBuilder, LocalRunner, measure), or on a Dask pool of devices
(DaskRunner, in measure/dask.py: import it from there, it needs `distributed`)."""
from .builder import LocalBuilder
from .candidate import BuildResult, MeasureCandidate, MeasureResult, make_record
from .runner import LocalRunner, measure

__all__ = ["LocalBuilder", "LocalRunner", "MeasureCandidate", "MeasureResult", "BuildResult", "make_record",
           "measure"]
