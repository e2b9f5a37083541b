"""The in-model check: tune_graph's candidates timed inside the compiled model before one is picked.

A kernel timed alone (caches flushed or warm) is not the kernel inside a model, where the previous
node's output is still in cache: on BERT-base the 36 QKV / output projections ran 0.329 ms each in
the model with the default schedule and 0.363 ms with the tuned one, while the tuner timed them
alone at 0.395 and 0.306 ms. So after the search, tune_graph (validate=True) compiles the whole
model (the ahead-of-time module) a few times:

- config 0: every checked task at its default schedule (the untuned model);
- config j = 1..top: every checked task at its j-th fastest isolated candidate (its fastest where it
  has fewer); tasks not checked keep their fastest record in every config;

and times them in interleaved rounds through `run_profiled` (a C timer around each node), so each
candidate of each task gets in-model seconds per call, summed over the task's nodes. A task keeps its
default unless a candidate beats it by more than `margin` (1%) on both the median and the minimum
over rounds; among such candidates the lowest median wins. The model of those picks is then timed end
to end against config 0 and config 1 (the isolated picks) in one set of interleaved rounds, and
`final_choice` decides: the picks when at least as fast (median and minimum) as both, else the
isolated picks when at least as fast as the untuned model, else every checked task's default. Each checked task's
choice is written to the database as a pick record (TuningRecord.pick: "record" or "default"),
which ApplyHistoryBest applies while it is the workload's latest record.

Tasks checked: those searched (more than their default measured) whose share of the estimated
latency is at least `min_share`. The budget (seconds) covers compiling and timing: configs 0 and 1
are always made; more only while the compile times so far say they fit in half the budget; rounds
(at least 3 a timing phase; the first phase leaves room for one more build and the second phase)
fill what is left, so a model whose calls are long can overrun the budget by those minimum rounds.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from ..executor import build_aot
from ..graph.lowering import compile_graph, graph_traces, static_problem
from .database import TuningRecord
from .workload import workload_key

ORDINALS = ("default", "best", "2nd", "3rd", "4th", "5th")


@dataclass
class TaskCheck:
    """One checked task: its candidates' isolated and in-model seconds (per node, medians and
    minima over rounds), and which was chosen (index into candidates; 0: the default)."""

    name: str
    weight: int
    labels: list                 # "default", "best", "2nd", ...
    isolated_secs: list          # per candidate, the tuner's time (None: not measured alone)
    median_secs: list            # per candidate, in-model seconds per node (median over rounds)
    min_secs: list
    chosen: int = 0

    @property
    def changed(self) -> bool:
        """Whether the model check chose otherwise than the isolated times (their fastest)."""
        iso = [s if s is not None else np.inf for s in self.isolated_secs]
        return self.chosen != int(np.argmin(iso))


@dataclass
class InModelCheck:
    """What the in-model check did (GraphTuneResult.validation): per checked task a TaskCheck;
    end-to-end seconds (median, minimum) of the untuned model ("default"), of the isolated picks
    ("isolated") and of the per-task picks ("picked"); `winner` which of those stands
    (final_choice), `reverted` when it is not the per-task picks;
    `skipped`: why no check ran (None when it did)."""

    tasks: list = field(default_factory=list)
    end_to_end: dict = field(default_factory=dict)
    configs: int = 0
    rounds: int = 0
    seconds: float = 0.0
    reverted: bool = False
    winner: str = "picked"
    skipped: str | None = None

    @property
    def changed(self) -> list:
        """Names of the tasks whose pick differs from their fastest isolated candidate."""
        return [t.name for t in self.tasks if t.changed]

    def table(self) -> str:
        """Per checked task its candidates' in-model ms per node (the pick starred), the end-to-end
        figures and what changed."""
        if self.skipped:
            return f"in-model check skipped: {self.skipped}"
        head = (f"in-model check: {len(self.tasks)} tasks, {self.configs} model builds, {self.rounds} rounds, "
                f"{self.seconds:.0f} s (ms per node inside the model, median; * the pick)")
        rows = [head]
        for t in self.tasks:
            cands = "  ".join(f"{lab} {m * 1e3:.4f}" + ("*" if i == t.chosen else "")
                              for i, (lab, m) in enumerate(zip(t.labels, t.median_secs)))
            rows.append(f"  {t.name[:48]:<48} x{t.weight:<3} {cands}")
        e = self.end_to_end
        if e:
            rows.append("  end to end (median / min ms): " + ", ".join(
                f"{k} {v[0] * 1e3:.3f} / {v[1] * 1e3:.3f}" for k, v in e.items()))
        if self.reverted and self.winner == "default":
            rows.append("  the picks measured slower than the untuned model (median or minimum): every checked task "
                        "kept its default")
        elif self.reverted:
            rows.append("  the per-task picks measured slower than the isolated picks end to end: every checked task "
                        "takes its isolated pick")
        rows.append(f"  changed from the isolated pick: {', '.join(self.changed) or 'none'}")
        return "\n".join(rows)

    def __repr__(self):
        if self.skipped:
            return f"<InModelCheck skipped: {self.skipped}>"
        return f"<InModelCheck {len(self.tasks)} tasks, changed {len(self.changed)}, reverted={self.reverted}>"


class _Fixed:
    """A `schedules` object for compile_graph: workload key -> trace JSON (None: the default)."""

    def __init__(self, traces: dict):
        self.traces = traces

    def lookup(self, func, target):
        return self.traces.get(workload_key(func))


def _weights_as_inputs(g):
    """(g with its constants as extra inputs, their arrays in input order): every config built
    without the weights compiled into its library (BERT-base's 440 MB a build), fed at run time."""
    consts = list(g.constants.items())
    if not consts:
        return g, []
    names = list(g.input_names) + [f"__weight_{i}" for i in range(len(consts))]
    return g.with_(inputs=tuple(g.inputs) + tuple(v for v, _ in consts), constants={}, input_names=names), \
        [a for _, a in consts]


def _inputs(exe, rng, weights) -> dict:
    """Inputs for the model: its own inputs random (floats from a normal distribution, integers and
    booleans zero: an index of zero is valid for every gather), then the weights."""
    feeds = {}
    specs = list(zip(exe.input_names, exe.inputs))
    own = specs[:len(specs) - len(weights)]
    for name, spec in own:
        dt = np.dtype(spec.np_dtype)
        shape = tuple(int(d) for d in spec.shape)
        feeds[name] = (rng.standard_normal(shape).astype(dt) if dt.kind == "f" else np.zeros(shape, dt))
    for (name, _), arr in zip(specs[len(own):], weights):
        feeds[name] = np.asarray(arr, order="C")      # (ascontiguousarray makes a 0-d array 1-d)
    return feeds


def _candidates(tuner, task, top: int) -> list:
    """[(label, schedule, isolated seconds)]: the task's default first, then its `top` fastest
    measured candidates (distinct programs, fastest first: "#1" is what the isolated times pick),
    the default among them where it ranks there."""
    search = tuner.search
    default = task.space.default() if hasattr(task.space, "default") else None
    if default is None:
        return []
    dkey = search.key(default)
    iso = {}
    for secs, s in search.measured:             # fastest first
        iso.setdefault(search.key(s), (secs, s))
    out = [("default", default, iso.get(dkey, (None,))[0])]
    for rank, (secs, s) in enumerate(list(iso.values())[:top], 1):    # in measured's order: fastest first
        if search.key(s) == dkey:
            out[0] = (f"default #{rank}", default, secs)
        else:
            out.append((f"#{rank}", s, secs))
    return out


def _rank_of(cands, j) -> int:
    """Which of cands config j runs: config 0 the default, config j the j-th fastest (the last
    there is where the task has fewer)."""
    if j == 0:
        return 0
    order = sorted(range(len(cands)), key=lambda c: (cands[c][2] is None, cands[c][2] or 0.0))
    return order[min(j, len(order)) - 1]


def choose(med, mn, margin: float = 0.01) -> int:
    """Which candidate a task keeps from its in-model seconds (median and minimum per candidate,
    index 0 the default): the lowest median among those beating the default by more than `margin`
    on both figures, else 0."""
    wins = [j for j in range(1, len(med)) if med[j] < med[0] * (1 - margin) and mn[j] < mn[0] * (1 - margin)]
    return min(wins, key=lambda j: med[j]) if wins else 0


def keeps(picked, default) -> bool:
    """Whether a configuration is at least as fast as another end to end: its (median, minimum)
    no slower on both."""
    return picked[0] <= default[0] and picked[1] <= default[1]


def final_choice(end_to_end: dict) -> str:
    """Which configuration stands, from end-to-end (median, minimum) per "default" / "isolated" /
    "picked": the per-task picks when at least as fast as the untuned model and as the isolated
    picks; else the isolated picks when at least as fast as the untuned model; else the default."""
    d, iso, p = end_to_end["default"], end_to_end.get("isolated"), end_to_end["picked"]
    if keeps(p, d) and (iso is None or keeps(p, iso) or not keeps(iso, d)):
        return "picked"
    if iso is not None and keeps(iso, d):
        return "isolated"
    return "default"


def check_in_model(optimized, target, tasks, tuners, database, budget: float, top: int = 3,
                   margin: float = 0.01, min_share: float = 0.01, seed: int = 0) -> InModelCheck:
    """Time the tasks' top candidates inside the compiled model and write each checked task's pick
    (see the module docstring). optimized: the optimized graph (extract_tasks' graph); tuners: the
    TaskTuners of `tasks` after the search. Returns an InModelCheck."""
    t0 = time.perf_counter()
    res = InModelCheck()
    if not target.is_cpu:
        res.skipped = f"target {target} (the check times the ahead-of-time module, CPU only)"
        return res
    why = static_problem(optimized)
    if why is not None:
        res.skipped = f"the model has symbolic shapes ({why})"
        return res
    est = sum(getattr(t, "weight", 1) * tu.best_secs for t, tu in zip(tasks, tuners) if tu.best_secs)
    base: dict = {}              # workload key -> trace every config uses (tasks not checked)
    checked = []                 # (index, key, candidates)
    for i, (t, tu) in enumerate(zip(tasks, tuners)):
        key = t.workload.key
        if tu.best_trace is not None:
            base[key] = tu.best_trace.as_json()
        if tu.best_secs is None or not est or getattr(t, "weight", 1) * tu.best_secs < min_share * est:
            continue
        cands = _candidates(tu, t, top)
        if len(cands) >= 2:
            checked.append((i, key, cands))
    if not checked:
        res.skipped = "no searched task with another candidate than its default"
        return res
    ncfg = 1 + min(top, max(len(c) for _, _, c in checked))

    def config(j):
        traces = dict(base)
        for _, key, cands in checked:
            traces[key] = cands[_rank_of(cands, j)][1].trace.as_json()
        return traces

    graph, weights = _weights_as_inputs(optimized)

    def build(traces):
        return build_aot(compile_graph(graph, target, build_kernels=False,
                                       traces=graph_traces(graph, target, _Fixed(traces))))

    exes, compile_secs = [], []
    for j in range(ncfg):
        spent = time.perf_counter() - t0
        if j >= 2 and spent + np.mean(compile_secs) > budget / 2:
            break
        c0 = time.perf_counter()
        exes.append(build(config(j)))
        compile_secs.append(time.perf_counter() - c0)
    res.configs = len(exes)
    # the candidates some built config runs
    checked = [(i, key, [c for n, c in enumerate(cands) if any(_rank_of(cands, j) == n for j in range(len(exes)))])
               for i, key, cands in checked]
    rng = np.random.default_rng(seed)
    feeds = _inputs(exes[0], rng, weights)
    # which plan steps run each checked task's kernel
    key_of_kernel: dict = {}
    steps_of: dict = {key: [] for _, key, _ in checked}
    for n, st in enumerate(exes[0].plan.steps):
        k = exes[0].compiled.kernels[st.kernel]
        if st.kernel not in key_of_kernel:
            key_of_kernel[st.kernel] = workload_key(k.func) if hasattr(k, "func") else None
        if key_of_kernel[st.kernel] in steps_of:
            steps_of[key_of_kernel[st.kernel]].append(n)
    checked = [c for c in checked if steps_of[c[1]]]

    def rounds_of(exes_, left):
        """Interleaved rounds over exes_ until `left` seconds are spent (at least 3, at most 25):
        per exe, per round, the mean per-node seconds and whole-call seconds of its calls."""
        for e in exes_:
            e.run_profiled(feeds)                               # warm-up (threads, pages)
        c0 = time.perf_counter()
        _, _, one = exes_[0].run_profiled(feeds)
        number = int(max(1, min(10, 0.05 / max(one, 1e-6))))
        per = [[] for _ in exes_]
        r0 = time.perf_counter()
        rounds = 0
        while rounds < 3 or (rounds < 25 and time.perf_counter() - c0 + (time.perf_counter() - r0) / rounds < left):
            order = list(range(len(exes_)))
            if rounds % 2:
                order.reverse()
            for j in order:
                acc, whole = None, 0.0
                for _ in range(number):
                    _, secs, w = exes_[j].run_profiled(feeds)
                    acc = np.asarray(secs) if acc is None else acc + secs
                    whole += w
                per[j].append((acc / number, whole / number))
            rounds += 1
        return per, rounds

    # the first rounds leave room for building the per-task picks' model and its rounds
    left = max(budget - (time.perf_counter() - t0) - float(np.mean(compile_secs)), 0.0)
    per, res.rounds = rounds_of(exes, left * 0.6)
    picks = {}
    for i, key, cands in checked:
        steps = steps_of[key]
        w = len(steps)
        # each candidate's rounds, from every config that runs it
        node = [np.concatenate([[r[0][steps].sum() / w for r in per[j]] for j in range(len(exes))
                                if _rank_of(cands, j) == c]) for c in range(len(cands))]
        med = [float(np.median(x)) for x in node]
        mn = [float(np.min(x)) for x in node]
        chosen = choose(med, mn, margin)
        res.tasks.append(TaskCheck(tasks[i].name, getattr(tasks[i], "weight", 1), [c[0] for c in cands],
                                   [c[2] for c in cands], med, mn, chosen))
        picks[key] = chosen

    def e2e(per_j):
        whole = np.array([r[1] for r in per_j])
        return float(np.median(whole)), float(np.min(whole))

    res.end_to_end = {"default": e2e(per[0]), "isolated": e2e(per[1])}
    final = [j for j in range(len(exes)) if all(picks[key] == _rank_of(c, j) for _, key, c in checked)]
    if final:
        res.end_to_end["picked"] = e2e(per[final[0]])
    else:
        # the three compared in one set of interleaved rounds (figures of separate rounds differ
        # by more than the picks do on a model of many small kernels)
        traces = dict(base)
        for _, key, cands in checked:
            traces[key] = cands[picks[key]][1].trace.as_json()
        fexe = build(traces)
        res.configs += 1
        left = max(budget - (time.perf_counter() - t0), 0.0)
        per2, r2 = rounds_of([exes[0], exes[1], fexe], left)
        res.rounds += r2
        res.end_to_end = {"default": e2e(per2[0]), "isolated": e2e(per2[1]), "picked": e2e(per2[2])}
    winner = final_choice(res.end_to_end)
    if winner != "picked" and any(picks.values()):
        res.reverted = True
        for (_, key, cands), t in zip(checked, res.tasks):
            t.chosen = 0 if winner == "default" else _rank_of(cands, 1)
            picks[key] = t.chosen
    res.winner = winner
    if database is not None:
        recs = []
        for (i, key, cands), check in zip(checked, res.tasks):
            j = picks[key]
            _, sch, iso = cands[j]
            if iso is None:
                continue              # never measured alone: nothing to stand for its isolated time
            recs.append(TuningRecord(key, tuners[i].target_key, sch.trace.as_json(), [iso],
                                     pick="default" if j == 0 else "record", in_model_secs=check.median_secs[j]))
        database.commit(recs)
    res.seconds = time.perf_counter() - t0
    return res


__all__ = ["check_in_model", "choose", "keeps", "InModelCheck", "TaskCheck"]
