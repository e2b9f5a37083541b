"""The tuner: search spaces over schedules, a learned cost model, search strategies, measurement on a
pool of devices, and a database of records (AutoTVM, Ansor, MetaSchedule).

    db = autotune.Database("tune.jsonl")
    res = autotune.tune_tir(func, target="c -num-threads=2", max_trials=1000, database=db)
    sch = autotune.apply_best(func, db, target)

    tasks = autotune.extract_tasks(graph, params, target)              # a whole model's kernels
    autotune.tune_graph(graph, params, target, max_trials=2000, database="tune.jsonl")
    exe = tessera.compile(graph, params, target, database="tune.jsonl")

docs/autotune.md walks through the parts; docs/autotune_features.md documents the feature vector.
"""
from .apply_history import ApplyHistoryBest, builtin_databases
from .cost_model import CostModel, RandomModel, XGBModel
from .database import Database, TuningRecord, record_target
from .features import extract_features
from .graph_tasks import GraphTask, KernelSpace, extract_tasks
from .measure import LocalBuilder, LocalRunner, MeasureCandidate, MeasureResult
from .measure.dask import DaskRunner
from .space import generate_design_space, sample_candidate
from .task import GeneratedSpace, Space, TuneTask
from .scheduler import GraphTuneResult, TaskReport, tune_graph
from .template import ConfigSpace, Template, get_template, template
from .tune import TuneResult, apply_best, tune_tir
from .workload import Workload

__all__ = ["tune_tir", "apply_best", "tune_graph", "extract_tasks", "GraphTuneResult", "TaskReport", "GraphTask",
           "KernelSpace", "ApplyHistoryBest", "builtin_databases", "record_target", "TuneResult", "TuneTask", "Space", "GeneratedSpace", "Database", "TuningRecord",
           "Workload", "LocalBuilder", "LocalRunner", "DaskRunner", "MeasureCandidate", "MeasureResult",
           "CostModel", "XGBModel", "RandomModel", "extract_features", "generate_design_space", "sample_candidate",
           "template", "get_template", "Template", "ConfigSpace"]
