"""A compiled graph as one C library with one entry point (the library the AOT executor and
`exe.export_library` use).

`build_library(compiled)` turns a compiled graph (graph/lowering.py: every node with one compiled
kernel, fused or not, and the runtime Plan; or the executor tessera.compile returns) into ONE C
translation unit:
- every distinct kernel, as the C code generator writes it (a `static` kernel function, its
  checked entry `tessera_call_NAME` and timer, so the graph executor can run the same library);
- the weights, embedded in the library's read-only data (`PREFIX_weights`, one 64-byte aligned
  blob assembled in with `.incbin`: no giant C initializer to parse, no file beside the library);
- with static shapes, the model entry points (C API below, rendered by codegen/c_aot.py from the
  step list made here), which call the kernel functions directly, node after node, over the static
  memory plan (tessera.graph.memory_plan):
  intermediates live in one arena, graph inputs are read from and outputs written to the
  caller's buffers, no per-op Python and no allocation per call;
- `tessera_graph`, the Plan as JSON (graph/document.py, runtime/plan.py), for loading back from Python.

The C API (PREFIX defaults to `tessera_model`; `model.h` declares it with the shapes as macros):

    PREFIX_t* PREFIX_create(void);          /* allocates the arena once; NULL when out of memory or when
                                               the CPU lacks a feature the kernels use (PREFIX_error(NULL)
                                               names them) */
    int32_t   PREFIX_run(PREFIX_t*, const void* const* inputs, void* const* outputs);
    const char* PREFIX_error(const PREFIX_t*);   /* message of the last failed run */
    void      PREFIX_destroy(PREFIX_t*);
    int32_t   PREFIX_run_with_workspace(void* workspace, const void* const* inputs,
                                        void* const* outputs, char* err, int32_t err_len);
    int32_t   PREFIX_run_profiled(PREFIX_t*, const void* const* inputs, void* const* outputs,
                                  double* secs);   /* PREFIX_run with a C timer around each node */

inputs[i] / outputs[k] point to compact row-major buffers of the graph's input / output types
(in graph order; they must not overlap each other). model.h names each by the model's public name
(`PREFIX_INPUT_0_NAME "gpu_0/data_0"`) and gives its index under a C identifier made from that
name (`PREFIX_INPUT_INDEX_gpu_0_data_0 0`; names that make the same identifier get `_1`, `_2`...,
in graph order: `c_names`). A status other than 0 is a tessera ABI status
(tessera/abi.py) with the message naming the node that failed. One instance runs one call at a time;
make one instance per thread. `PREFIX_run_with_workspace` takes a caller-owned arena of
PREFIX_WORKSPACE_BYTES (64-byte aligned) instead, for programs that do not allocate.
`PREFIX_run_profiled` is PREFIX_run (the same body) that writes the seconds of each node, in
execution order, to secs[0..PREFIX_NUM_NODES-1] and those of the whole call to secs[PREFIX_NUM_NODES]:
what `exe.profile()` reads, in the order and cache state of a real call.

A graph with symbolic dimensions gets no model entry points (a static memory plan needs static
shapes); its library still runs through the graph executor (`build_library(..., aot=False)`).
"""
from __future__ import annotations

import hashlib
import json
import os
import re
from typing import NamedTuple

import numpy as np

from .. import progress
from ..backend import Source, functions_of, get_backend
from ..codegen.c_aot import (EntryCall, ModelEntry, ModelHeader, OutputCopy, Place, WEIGHT_ALIGN, c_names,
                             entry_source, header_text, weights_c)
from ..codegen.c_base import c_string
from ..errors import BuildError, ShapeError, TesseraError
from ..graph.document import graph_document
from ..graph.ir import Graph
from ..graph.kernels import compile_kernels
from ..graph.lowering import memory_layout, static_problem
from ..graph.memory_plan import plan_memory
from ..ir.names import identifier
from ..runtime import cache
from .compiled import compiled_of

DEFAULT_PREFIX = "tessera_model"
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class Library(NamedTuple):
    """A compiled graph library: its path (in the compiler cache), the C header text (None
    without model entry points), the tessera_graph document and the MemoryPlan of the entry
    points (None without them)."""

    path: str
    header: str | None
    doc: dict
    memory_plan: object = None


def check_prefix(prefix: str) -> str:
    if not isinstance(prefix, str) or not _IDENT.match(prefix) or prefix.startswith(("tsr_", "tessera_call",
                                                                                          "tessera_time")):
        raise TesseraError(f"the C API prefix must be a C identifier not starting with tsr_/tessera_call/"
                           f"tessera_time (e.g. 'resnet18'), got {prefix!r}")
    return prefix


def _static_error(graph: Graph, why: str) -> TesseraError:
    return ShapeError(f"the ahead-of-time module of graph {graph.name!r} needs static shapes, but {why}; fix "
                      f"the symbolic dimensions when importing (from_onnx(model, shape_dict={{'input': (1, 3, 224, "
                      f"224)}}), `tessera compile --shape input=1,3,224,224`), or use the graph executor")


# ---------------------------------------------------------------------------------------------
# kernels
# ---------------------------------------------------------------------------------------------
def _lower_kernels(compiled):
    """One lowered PrimFunc per distinct kernel of the compiled graph, named as the plan names it
    (`<op>_<k>`); (lowered functions, kernels JSON for the graph document). A kernel prepared in this
    process brings its lowered program (graph/kernels.py: lowered once, whether or not it is ever
    compiled on its own)."""
    backend = get_backend(compiled.target)
    plan = compiled.plan
    lowered, kernels_json = [], {}
    nodes = {st.kernel: st for st in plan.steps}
    for name, k in compiled.kernels.items():
        st = nodes[name]
        prim = getattr(k, "prim", None)
        if prim is None:
            raise TesseraError(f"export: the kernel of node {st.name!r} ({k.op}) was not built in this "
                               f"process, so its program is not at hand (a loaded library is exported by "
                               f"copying it: exe.export_library on the loaded module)")
        try:
            kernels_json[name] = plan.kernels[name].as_json(name)
        except TesseraError as e:
            raise TesseraError(f"export_library: node {st.name!r}: {e}") from None
        done = getattr(k, "lowered", None)
        if done is not None:
            lowered.append(done.replace(name=name))
            continue
        funcs = functions_of(prim)
        if len(funcs) != 1:
            raise TesseraError(f"export: the kernel of node {st.name!r} ({k.op}) has {len(funcs)} functions, "
                               f"expected 1")
        lowered.append(backend.lower(funcs[0].replace(name=name), compiled.target))
    return lowered, kernels_json


def _prototypes(source, names) -> dict:
    """kernel name -> (C pointer type per parameter, takes (err, err_len)), from the backend's
    description of each generated kernel."""
    out = {}
    for name in names:
        info = source.function(name)
        if info.shape_vars:
            raise BuildError(f"ahead-of-time module: kernel {name} takes the symbolic extents "
                             f"{', '.join(info.shape_vars)}; a kernel with symbolic extents cannot run from a "
                             f"static plan")
        types = [t.replace(" restrict", "") for t in info.kernel_params]
        scalar = [t for t in types if not t.endswith("*")]
        if scalar:
            raise BuildError(f"ahead-of-time module: kernel {name} takes `{scalar[0]}`, not a tensor pointer")
        out[name] = (types, info.kernel_takes_err)
    return out


# ---------------------------------------------------------------------------------------------
# weights
# ---------------------------------------------------------------------------------------------
def _weights_layout(graph: Graph):
    """(constant -> byte offset, blob bytes): the constants in graph order, each 64-byte aligned."""
    offsets, chunks, top = {}, [], 0
    for v, arr in graph.constants.items():
        data = np.ascontiguousarray(arr).tobytes()
        pad = -top % WEIGHT_ALIGN
        if pad:
            chunks.append(b"\0" * pad)
            top += pad
        offsets[v] = top
        chunks.append(data)
        top += len(data)
    return offsets, b"".join(chunks)


def _weights_path(digest: str) -> str:
    """Where the compiler cache keeps the weights blob of sha256 `digest` (a library's text .incbin's it)."""
    path = os.path.join(cache.cache_dir(), "weights", digest + ".bin")
    if any(c in path for c in '"\\\n'):
        raise TesseraError(f"export: the cache path {path} has a quote, backslash or newline; set "
                           f"TESSERA_CACHE_DIR to a plain path")
    return path


def _weights_file(blob: bytes, digest: str | None = None) -> tuple:
    """The blob saved under the compiler cache by content, for a library that embeds it to be compiled;
    (path, sha256). A blob already there is used when its content has the sha256 its name says (checked
    once per process and version of the file; a hit counts as a use for the cache's LRU eviction), else
    written again."""
    digest = digest or hashlib.sha256(blob).hexdigest()
    cache.folder("weights")
    path = _weights_path(digest)
    if not cache.hit(path, digest):
        cache.write(path, blob, "the weights blob", record=False)
    return path, digest


# ---------------------------------------------------------------------------------------------
# the model entry points
# ---------------------------------------------------------------------------------------------
def model_entry(compiled, prefix: str, plan, protos: dict, w_offsets: dict) -> ModelEntry:
    """The step list codegen/c_aot.py renders the entry points from: each node's kernel call with
    the Place of every tensor it reads and writes, the outputs no kernel writes in place."""
    g = compiled.graph
    in_index = {v: i for i, v in enumerate(g.inputs)}
    out_index: dict = {}
    for k, v in enumerate(g.outputs):
        out_index.setdefault(v, k)

    def place(v) -> Place:
        if v in in_index:
            return Place("input", in_index[v])
        if v in w_offsets:
            return Place("weights", w_offsets[v])
        if v in out_index:
            return Place("output", out_index[v])
        return Place("arena", plan[v].offset)

    calls = []
    for n, st in zip(g.nodes, compiled.plan.steps):
        types, has_err = protos[st.kernel]
        vals = list(n.inputs) + list(n.outputs)
        if len(types) != len(vals):
            raise BuildError(f"ahead-of-time module: kernel {st.kernel} of node {n.name!r} ({n.op}) takes "
                             f"{len(types)} tensors, the node has {len(n.inputs)} inputs and {len(n.outputs)} "
                             f"outputs")
        calls.append(EntryCall(n.name, n.op, st.kernel, tuple(types), tuple(place(v) for v in vals), has_err,
                               ", ".join(f"%{v.name}" for v in n.inputs),
                               ", ".join(f"%{o.name}: {o.type} at {place(o).describe()}" for o in n.outputs)))
    copies = []
    for k, v in enumerate(g.outputs):     # outputs no node writes in place: inputs, constants, repeated values
        if out_index[v] == k and v not in in_index and v not in w_offsets:
            continue
        src = place(v) if (v in in_index or v in w_offsets) else Place("output", out_index[v])
        copies.append(OutputCopy(k, src, v.type.nbytes(), g.output_names[k], v.name))
    return ModelEntry(prefix, compiled.target, tuple(g.input_names), tuple(g.output_names),
                      tuple(v.type.nbytes() for v in g.inputs), tuple(v.type.nbytes() for v in g.outputs),
                      plan.arena_bytes, tuple(calls), tuple(copies))


def model_header(graph: Graph, prefix: str, plan, weights_bytes: int, target) -> ModelHeader:
    return ModelHeader(graph.name, prefix, tuple(zip(graph.input_names, (v.type for v in graph.inputs))),
                       tuple(zip(graph.output_names, (v.type for v in graph.outputs))), plan.arena_bytes,
                       weights_bytes, len(graph.nodes), str(target))


# ---------------------------------------------------------------------------------------------
# the library
# ---------------------------------------------------------------------------------------------
def build_library(exe, prefix: str = DEFAULT_PREFIX, aot: bool | None = None,
                  strategy: str = "greedy", pool: bool = True) -> Library:
    """Compile a compiled graph (a CompiledGraph, or the executor tessera.compile returns) into one
    library (see the module docstring).

    aot: True requires the model entry points (static shapes), False leaves them out, None adds
    them when the shapes are static. strategy: plan_memory's. A unit the C compiler refuses is built
    once more after each scheduled kernel that does not compile on its own fell back to its
    unscheduled program (graph Kernel.unschedule: the one fall-back, one warning a kernel).
    pool: parallel loops on tessera's thread pool (a library this process loads); False: on libgomp
    (a library for programs outside tessera, export_library).
    """
    compiled = compiled_of(exe)
    check_prefix(prefix)
    g = compiled.graph
    target = compiled.target
    if not target.is_cpu:
        raise TesseraError(f"the ahead-of-time module's entry calls each kernel as a host C function; the "
                           f"kernels of target {target} are not (use the graph executor for it)")
    backend = get_backend(target)
    why = static_problem(g)
    if aot and why:
        raise _static_error(g, why)
    with_entry = why is None if aot is None else bool(aot)
    plan = None
    if with_entry:
        plan = compiled.memory_plan
        if plan is None or plan.strategy != strategy:
            plan = plan_memory(g, strategy=strategy)
    with progress.stage("writing the library's C", detail=f"{len(compiled.kernels)} kernels"):
        unit, header, doc = _unit(compiled, prefix, plan, with_entry, backend, pool)
    try:
        with progress.stage("compiling the library", detail=f"{len(compiled.kernels)} kernels in one C file"):
            path = backend.compile(unit)
    except BuildError:
        if not _unschedule_failing(compiled):
            raise
        unit, header, doc = _unit(compiled, prefix, plan, with_entry, backend, pool)   # the fallen-back kernels in it
        with progress.stage("compiling the library again", detail="the failing kernels unscheduled"):
            path = backend.compile(unit)
    return Library(path, header, doc, plan)


def _unit(compiled, prefix: str, plan, with_entry: bool, backend, pool: bool) -> tuple:
    """(the library's translation unit as a backend Source, its header or None, its graph document)."""
    g, target = compiled.graph, compiled.target
    lowered, kernels_json = _lower_kernels(compiled)
    taken = set(kernels_json)
    clash = [n for n in taken if n.startswith(prefix + "_") or prefix.startswith(n + "_") or n == prefix]
    if clash:
        raise TesseraError(f"the C API prefix {prefix!r} collides with kernel names {clash}; pick another prefix")
    w_offsets, blob = _weights_layout(g)
    if lowered:
        source = backend.render(lowered, target, identifier(g.name))
        text = source.text
    else:
        source = None
        text = ('/* a graph without kernels */\n#include <stdint.h>\n#include <stdio.h>\n#include <stdlib.h>\n'
                '#include <string.h>\n#include <math.h>\n#include <time.h>\n'
                'const char tessera_metadata[] = "{\\"version\\": 1, \\"functions\\": []}";\n')
    header = None
    digest = hashlib.sha256(blob).hexdigest()
    parts = [text, "", weights_c(prefix, len(blob), digest, _weights_path(digest) if blob else "")]
    if with_entry:
        protos = _prototypes(source, kernels_json) if source is not None else {}
        parts.append(entry_source(model_entry(compiled, prefix, plan, protos, w_offsets)))
        header = header_text(model_header(g, prefix, plan, len(blob), target))
    slot_of = _slots(compiled)
    doc = graph_document(compiled, w_offsets, prefix, len(blob),
                         memory_layout(plan, slot_of) if with_entry else None)
    if with_entry:
        doc["aot"] = {"prefix": prefix, "workspace_bytes": plan.arena_bytes, "strategy": plan.strategy,
                      "plan": plan.as_dict(), "header": header}
    text = json.dumps(doc, separators=(",", ":"))
    parts.append("/* the graph this library runs (tessera.graph.document) */\nconst char tessera_graph[] =\n"
                 + "  " + c_string(text, 100, sep="\n  ") + ";\n")
    # the blob is written (or checked) only when the library is compiled: a cached library needs no blob
    unit = Source("\n".join(parts), source.functions if source else (), target, identifier(g.name),
                  prepare=(lambda: _weights_file(blob, digest)) if blob else None, pool=pool)
    return unit, header, doc


def _unschedule_failing(compiled) -> bool:
    """After the library's unit failed to compile: build each scheduled kernel on its own, so that one
    the C compiler refuses falls back to its unscheduled program (graph Kernel.unschedule); whether
    any kernel changed."""
    ks = [k for k in compiled.kernels.values() if getattr(k, "scheduled", False) and hasattr(k, "unschedule")]
    before = [k.lowered for k in ks]
    compile_kernels(ks)
    return any(k.lowered is not b for k, b in zip(ks, before))


def _slots(compiled) -> dict:
    """Value -> its slot in the compiled graph's plan (inputs, constants, node outputs)."""
    g, plan = compiled.graph, compiled.plan
    out = dict(zip(g.inputs, plan.inputs))
    out.update(zip(g.constants, sorted(plan.constants)))
    for n, st in zip(g.nodes, plan.steps):
        out.update(zip(n.outputs, st.outs))
    return out


__all__ = ["DEFAULT_PREFIX", "Library", "build_library", "check_prefix", "c_names", "model_entry",
           "model_header"]
