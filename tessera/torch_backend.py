"""torch.compile's tessera backend: `torch.compile(model, backend="tessera")`.

    model = torch.compile(model.eval(), backend="tessera", options={"opt_level": 3})
    with torch.no_grad():
        y = model(x)

Registered as "tessera" through the `torch_dynamo_backends` entry point (pyproject.toml); the
backend function is `tessera_backend`. Dynamo gives it an FX graph of torch calls and example
inputs; aot_autograd lowers that to core ATen (torch's core decomposition table, less the CPU
flash-attention op that tessera converts whole), functionalized, for inference; the ATen graph is
converted by the PyTorch frontend (tessera.frontend.torch.import_fx_graph) and compiled with
tessera.compile (one C entry point over a static memory plan where the shapes are static). The
compiled function takes the torch tensors and gives torch tensors, numpy views of the same memory
both ways (DLPack: no copies).

- Weights: the graph's parameters and buffers are frozen into the compiled model (bound as
  constants, so tessera folds batch norms into convolutions and packs GEMM weights, as Inductor's
  `freezing`): changing a weight afterwards needs torch._dynamo.reset() and a new compile.
  options={"freeze": False} keeps them inputs of the compiled model (read each call).
- options: target (a tessera Target or its text; "c" by default), database (tuning records,
  tessera.compile's), opt_level (0-3), executor ("auto", "graph", "aot"), freeze (bool),
  converters ({"aten.foo.default": fn}, the frontend's). Anything else is refused.
- Ops tessera cannot convert: the graph is partitioned (torch.fx's CapabilityBasedPartitioner): the
  runs of supported ops compile with tessera, the others run in eager PyTorch, and one warning names
  the ops left to eager. Never a crash, never a wrong result: a converter that disagrees with
  torch's types is treated as missing, and a graph tessera fails to compile (a TesseraError) runs in
  eager with a warning saying why.
- Symbolic sizes: torch.compile(dynamic=True) or torch._dynamo.mark_dynamic give symbolic sizes,
  which become tessera's symbolic dimensions: one compile serves every size.
- Gradients: where the inputs or weights require gradients with grad mode on, the graph runs in
  eager with a one-line warning (tessera compiles inference; use torch.no_grad() or
  torch.inference_mode()).
- Compiled kernels are cached on disk by tessera's compiler driver: a second process compiles the
  same model from that cache.
"""
from __future__ import annotations

import copy
import functools
import warnings

import numpy as np

from .compile_graph import EXECUTORS, BuildOnceCache, compile as tessera_compile
from .errors import TesseraError
from .frontend.torch import import_fx_graph, target_name, tensor_array
from .frontend.torch_ops.sizes import factors, size_expr
from .target import Target

OPTIONS = ("target", "database", "opt_level", "executor", "freeze", "converters")
# ops moved or renamed only: a partition of them alone is not worth a tessera call
_NON_COMPUTE = ("torch.ops.aten.view.default", "torch.ops.aten._unsafe_view.default",
                "torch.ops.aten.permute.default", "torch.ops.aten.expand.default", "torch.ops.aten.clone.default",
                "torch.ops.aten.alias.default", "torch.ops.aten.unsqueeze.default", "torch.ops.aten.squeeze.dims",
                "torch.ops.aten.squeeze.dim", "torch.ops.aten.slice.Tensor", "torch.ops.aten.select.int",
                "torch.ops.aten.sym_size.int", "_operator.getitem", "_operator.mul", "_operator.add",
                "_operator.sub", "_operator.floordiv")


def _options(options) -> dict:
    """The options, checked now (a mistake is the caller's to fix, not a reason to run in eager)."""
    opts = dict(options or {})
    unknown = sorted(set(opts) - set(OPTIONS))
    if unknown:
        raise TesseraError(f"torch.compile(backend='tessera'): unknown options {unknown}; it takes "
                           f"{', '.join(OPTIONS)}")
    if "target" in opts:
        opts["target"] = Target(opts["target"])
    level = opts.get("opt_level", 3)
    if isinstance(level, bool) or level not in (0, 1, 2, 3):
        raise TesseraError(f"torch.compile(backend='tessera'): opt_level must be 0, 1, 2 or 3, got {level!r}")
    if opts.get("executor", "auto") not in EXECUTORS:
        raise TesseraError(f"torch.compile(backend='tessera'): executor must be one of {EXECUTORS}, got "
                           f"{opts['executor']!r}")
    if not isinstance(opts.get("freeze", True), bool):
        raise TesseraError(f"torch.compile(backend='tessera'): freeze must be True or False, got {opts['freeze']!r}")
    if not isinstance(opts.get("converters") or {}, dict):
        raise TesseraError("torch.compile(backend='tessera'): converters must be a dict {'aten.foo.default': fn}")
    return opts


def _compile_kwargs(opts: dict) -> dict:
    return {k: opts[k] for k in ("target", "database", "opt_level", "executor") if k in opts}


def _weight_positions(gm, example_inputs) -> set:
    """The positions of dynamo's graph inputs that are a module's parameters or buffers."""
    import torch

    out = set()
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for i, (node, x) in enumerate(zip(placeholders, example_inputs)):
        if not isinstance(x, torch.Tensor):
            continue
        source = getattr(node.meta.get("grapharg"), "source", None)
        name = getattr(source, "name", "") if source is not None else ""
        name = name() if callable(name) else str(name)
        if isinstance(x, torch.nn.Parameter) or "._parameters[" in name or "._buffers[" in name:
            out.add(i)
    return out


def tessera_backend(gm, example_inputs, options=None):
    """The torch.compile backend: dynamo's graph -> core ATen (aot_autograd) -> tessera."""
    import torch
    from torch._dynamo.backends.common import aot_autograd
    from torch._decomp import core_aten_decompositions

    opts = _options(options)
    if torch.is_grad_enabled() and any(isinstance(x, torch.Tensor) and x.requires_grad for x in example_inputs):
        warnings.warn("tessera compiles inference: this graph's inputs or weights require gradients with grad mode "
                      "on, so it runs in eager PyTorch (call it under torch.no_grad() or torch.inference_mode())",
                      stacklevel=2)
        return gm.forward
    real = list(example_inputs)
    weights = _weight_positions(gm, real) if opts.get("freeze", True) else set()
    table = core_aten_decompositions()
    table.pop(torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default, None)

    def compiler(fx_gm, fake_inputs):
        from torch._subclasses.fake_tensor import unset_fake_temporarily

        frozen = {i: real[i] for i in weights} if len(fake_inputs) == len(real) else {}
        with unset_fake_temporarily():      # aot_autograd calls its compiler under its fake mode
            try:
                return _boxed(_compile_aten(fx_gm, frozen, opts))
            except TesseraError as e:
                warnings.warn(f"tessera could not compile this graph, so it runs in eager PyTorch: {e}", stacklevel=2)
                return _boxed(fx_gm.forward)

    return aot_autograd(fw_compiler=compiler, inference_compiler=compiler, decompositions=table,
                        keep_inference_input_mutations=False)(gm, example_inputs)


def _boxed(fn):
    from torch._functorch.aot_autograd import make_boxed_func

    return make_boxed_func(fn)


def _compile_aten(fx_gm, frozen: dict, opts: dict, sizes=None):
    """The callable running ATen graph fx_gm: one tessera program, or the graph partitioned between
    tessera and eager where some ops do not convert. Where the graph converts with its sizes fixed
    but not with torch's symbolic sizes (a convolution over symbolic spatial sizes: its output is
    (H + 2p - k) // s + 1, which a tessera dimension cannot be), it is compiled per distinct size
    (`_Specializing`) instead of left to eager. sizes: {symbol: int} to specialize to."""
    converters = opts.get("converters")
    conv = import_fx_graph(fx_gm, frozen, converters, name="torch_compile", sizes=sizes)
    if not conv.failed:
        return _Runner(conv, tessera_compile(conv.graph, **_compile_kwargs(opts)) if conv.graph is not None else None)
    if sizes is None:
        hints = _size_hints(fx_gm)
        if hints and len(import_fx_graph(fx_gm, frozen, converters, "torch_compile", hints).failed) < len(conv.failed):
            warnings.warn(f"tessera: sizes of this graph ({_derived_sizes(fx_gm)}) are not tessera dimensions (ints "
                          f"or single symbols); it is compiled once per distinct input size", stacklevel=3)
            return _Specializing(fx_gm, frozen, opts)
    return _partitioned(fx_gm, frozen, opts, conv, sizes)


def _placeholder_symbols(fx_gm) -> list:
    """[(placeholder position, axis or None, symbol)] for every input size that is a plain symbol
    (axis None: a SymInt input)."""
    out = []
    for i, n in enumerate(n for n in fx_gm.graph.nodes if n.op == "placeholder"):
        val = n.meta.get("val")
        dims = [(a, d) for a, d in enumerate(val.shape)] if hasattr(val, "shape") else [(None, val)]
        for a, d in dims:
            e = size_expr(d)
            if getattr(e, "is_Symbol", False):
                out.append((i, a, str(e)))
    return out


def _size_hints(fx_gm) -> dict:
    """{symbol: the example's value} of the graph's symbolic input sizes."""
    hints = {}
    for i, n in enumerate(n for n in fx_gm.graph.nodes if n.op == "placeholder"):
        val = n.meta.get("val")
        dims = list(val.shape) if hasattr(val, "shape") else [val]
        for d in dims:
            node = getattr(d, "node", None)
            hint = getattr(node, "hint", None)
            if node is not None and hint is not None and getattr(node.expr, "is_Symbol", False):
                hints[str(node.expr)] = int(hint)
    return hints


def _derived_sizes(fx_gm) -> str:
    """A few sizes of the graph's tensors that are expressions of symbols (for the warning)."""
    seen = []
    for n in fx_gm.graph.nodes:
        val = n.meta.get("val")
        for d in getattr(val, "shape", ()):
            e = size_expr(d)
            if factors(e) is None and str(e) not in seen:
                seen.append(str(e))
    return ", ".join(seen[:4]) + (", ..." if len(seen) > 4 else "")


class _Specializing:
    """Runs a graph compiled per distinct value of its symbolic sizes (read from the inputs'
    shapes), each made on first use (tessera.compile's specialization; the `max_specializations`
    most recently used are kept)."""

    max_specializations = 64

    def __init__(self, fx_gm, frozen: dict, opts: dict):
        self.fx_gm, self.frozen, self.opts = fx_gm, frozen, opts
        self.symbols = _placeholder_symbols(fx_gm)
        # each specialization compiled once, outside the cache's lock: calls of sizes already compiled
        # run while another size compiles
        self.cache = BuildOnceCache(self.max_specializations)

    def __call__(self, *args):
        sizes = {}
        for i, a, sym in self.symbols:
            sizes.setdefault(sym, int(args[i]) if a is None else int(args[i].shape[a]))
        key = tuple(sorted(sizes.items()))
        fn = self.cache.get(key, lambda: _compile_aten(self.fx_gm, self.frozen, self.opts, sizes))
        return fn(*args)


class _Runner:
    """Calls one compiled tessera graph with torch tensors (numpy views of them: DLPack), returns
    torch tensors viewing tessera's output arrays, and the sizes the graph returns from the
    bindings of the inputs' shapes."""

    def __init__(self, conv, exe):
        self.conv = conv
        self.exe = exe
        self.names = list(exe.input_names) if exe is not None else []

    def __call__(self, *args):
        import torch

        c = self.conv
        outs = self.exe.run(dict(zip(self.names, (_array(args[i]) for i in c.tensor_inputs)))) \
            if self.exe is not None else []
        result = []
        sizes = None
        for kind, v in c.outputs:
            if kind == "tensor":
                result.append(torch.from_dlpack(_writable(outs[v])))
            elif kind == "size":
                if sizes is None:
                    sizes = {s: args[i].shape[a] for s, (i, a) in c.bindings.items()}
                result.append(_size_of(v, sizes))
            else:
                result.append(v)
        return result


def _array(t) -> np.ndarray:
    """A numpy view of torch tensor t (no copy; tessera copies a non-contiguous one)."""
    import torch

    if t.dtype == torch.bfloat16:
        return tensor_array(t)
    return np.from_dlpack(t.detach())


def _writable(a: np.ndarray) -> np.ndarray:
    """a, writable (torch.from_dlpack refuses read-only arrays; tessera's outputs are fresh arrays)."""
    if not a.flags.writeable:
        a = a.copy()
    return a


def _size_of(expr, sizes: dict):
    if isinstance(expr, (int, float, bool)) or expr is None:
        return expr
    return int(expr.subs({s: sizes[str(s)] for s in expr.free_symbols}))


# ---------------------------------------------------------------------------------------------
# partitioning
# ---------------------------------------------------------------------------------------------
def _partitioned(fx_gm, frozen: dict, opts: dict, first, sizes=None):
    """fx_gm with the runs of convertible nodes compiled by tessera, the rest in eager; one warning
    naming the ops left to eager. A run whose conversion fails once cut out of the graph (a node
    that needed a constant its run no longer holds) loses those nodes too, until every run converts."""
    import torch
    from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
    from torch.fx.passes.operator_support import OperatorSupport

    eager = set(first.failed)
    named = {n.name: n for n in fx_gm.graph.nodes}
    placeholders = [n.name for n in fx_gm.graph.nodes if n.op == "placeholder"]
    frozen_by_name = {placeholders[i]: t for i, t in frozen.items()}
    for _ in range(len(named) + 1):
        gm = torch.fx.GraphModule(fx_gm, copy.deepcopy(fx_gm.graph))

        class Support(OperatorSupport):
            def is_node_supported(self, submodules, node) -> bool:
                return node.op == "call_function" and node.name not in eager

        parts = CapabilityBasedPartitioner(gm, Support(), allows_single_node_partition=False,
                                           non_compute_ops=list(_NON_COMPUTE)).propose_partitions()
        split = CapabilityBasedPartitioner(gm, Support()).fuse_partitions(parts, prefix="tessera_")
        more = set()
        compiled = {}
        for node in list(split.graph.nodes):
            if node.op != "call_module" or not node.target.startswith("tessera_"):
                continue
            sub = getattr(split, node.target)
            sub_frozen = {i: frozen_by_name[a.name] for i, a in enumerate(node.args)
                          if hasattr(a, "op") and a.op == "placeholder" and a.name in frozen_by_name}
            conv = import_fx_graph(sub, sub_frozen, opts.get("converters"), f"torch_compile_{node.target}", sizes)
            if conv.failed:
                more.update(conv.failed)
                continue
            compiled[node.target] = conv
        if more - eager:
            eager |= more
            continue
        for target, conv in compiled.items():
            exe = tessera_compile(conv.graph, **_compile_kwargs(opts)) if conv.graph is not None else None
            single = not isinstance(getattr(split, target).graph.output_node().args[0], (list, tuple))
            setattr(split, target, _partition_module()(_Runner(conv, exe), single))
        _warn_eager(eager, named)
        split.recompile()
        return split.forward
    raise TesseraError("torch.compile(backend='tessera'): partitioning did not settle")


@functools.cache
def _partition_module():
    """The nn.Module class a partition's call_module node calls (made when torch is first used)."""
    import torch

    class TesseraPartition(torch.nn.Module):
        """A run of the graph's nodes compiled by tessera: returns the one output, or a tuple, as the
        submodule fuse_partitions made in its place."""

        def __init__(self, runner, single: bool):
            super().__init__()
            self.runner = runner
            self.single = single

        def forward(self, *args):
            outs = self.runner(*args)
            return outs[0] if self.single else tuple(outs)

    return TesseraPartition


def _warn_eager(eager: set, named: dict) -> None:
    ops = {}
    for name in eager:
        node = named.get(name)
        if node is not None and node.op == "call_function":
            ops.setdefault(target_name(node.target), []).append(name)
    listed = "; ".join(f"{op} ({len(ns)} node{'s' if len(ns) > 1 else ''})" for op, ns in sorted(ops.items()))
    warnings.warn(f"tessera: ops left to eager PyTorch (no tessera conversion): {listed}; the rest of the graph "
                  f"runs in tessera", stacklevel=3)
