"""Measurement: candidates built in worker processes, checked against the untuned program and timed
in C in a separate process (LocalBuilder, LocalRunner, measure), or on a Dask pool of devices
(DaskRunner; `distributed` is imported only when one is made). GPU targets: built through their
backend, timed on their device (opencl on PoCL too); cuda without a GPU here is refused
(check_device)."""
from .builder import LocalBuilder
from .candidate import BuildResult, MeasureCandidate, MeasureResult, make_record
from .dask import DaskRunner
from .runner import LocalRunner, check_device, measure

__all__ = ["LocalBuilder", "LocalRunner", "DaskRunner", "MeasureCandidate", "MeasureResult", "BuildResult",
           "check_device", "make_record", "measure"]
