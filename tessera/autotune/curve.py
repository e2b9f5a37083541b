"""The tuning curve of a model: its estimated latency (sum over tasks of weight x best kernel time)
vs trials and vs seconds, as tune_graph's history records it, drawn with matplotlib (optional)."""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import TesseraError


@dataclass(frozen=True)
class TuningCurve:
    """points: (trials, seconds, estimated ms) per round with an estimate (the first rounds have none
    until every task's default is measured), the last one the final estimate; default_ms: the default
    schedules' estimate the curve is compared with (where tuning started from nothing, the curve's
    first point: the defaults as first measured, so curve and line compare like with like);
    final_default_ms: the defaults' estimate measured again at the end (None where unknown)."""

    points: tuple
    default_ms: float | None
    final_default_ms: float | None

    @property
    def final_ms(self) -> float:
        return self.points[-1][2]


def tuning_curve(result, resumed: bool = False) -> TuningCurve:
    """The curve of a GraphTuneResult; resumed: the run continued a database's trials (its first
    estimate already holds tuned kernels, so the line is the defaults' final estimate instead)."""
    pts = tuple((t, s, e * 1e3) for t, s, e in result.history if e is not None)
    if not pts:
        raise TesseraError("no tuning round completed a latency estimate: nothing to plot")
    final_default = result.default_latency * 1e3 if result.default_latency else None
    return TuningCurve(pts, final_default if resumed else pts[0][2], final_default)


def plot_tuning_curve(curve: TuningCurve, path, title: str = "") -> str:
    """A PNG of the curve vs trials and vs seconds, the default line and the final estimate; the path."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: PLC0415 (optional dependency)
        from matplotlib.figure import Figure  # noqa: PLC0415
    except ImportError:
        raise TesseraError("the tuning-curve PNG needs matplotlib (pip install 'tessera[tune]'); "
                           "leave --png out to skip it") from None
    pts, final = curve.points, curve.final_ms
    summary = f"final estimate {final:.4g} ms"
    if curve.final_default_ms:
        summary += (f", {curve.final_default_ms / final:.2f}x the default schedules measured again "
                    f"({curve.final_default_ms:.4g} ms)")
    fig = Figure(figsize=(10, 4.4), layout="constrained")
    FigureCanvasAgg(fig)
    for k, (ax, xlabel) in enumerate(zip(fig.subplots(1, 2), ("trials", "seconds"))):
        ax.step([p[k] for p in pts], [p[2] for p in pts], where="post", label="tuned (best so far)")
        ax.plot([pts[-1][k]], [final], "o", color="C0", label="final estimate")
        if curve.default_ms:
            ax.axhline(curve.default_ms, color="grey", linestyle="--", label="default schedules")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("estimated latency (ms)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small", loc="upper right")
    fig.suptitle(f"{title}: {summary}" if title else summary)
    fig.savefig(path, dpi=100)
    return str(path)


__all__ = ["TuningCurve", "plot_tuning_curve", "tuning_curve"]
