"""The ahead-of-time module: a whole compiled graph as one C library with one entry point.

`build_library(compiled)` turns a compiled graph (graph/compiler.py: every node with one compiled
kernel, fused or not, and the runtime Plan; or the executor tessera.compile returns) into ONE C
translation unit:
- every distinct kernel, as the C code generator writes it (a `static` kernel function, its
  checked entry `tessera_call_NAME` and timer, so the graph executor can run the same library);
- the weights, embedded in the library's read-only data (`PREFIX_weights`, one 64-byte aligned
  blob assembled in with `.incbin`: no giant C initializer to parse, no file beside the library);
- with static shapes, the model entry points (C API below), which call the kernel functions
  directly, node after node, over the static memory plan (tessera.graph.passes.plan_memory):
  intermediates live in one arena, graph inputs are read from and outputs written to the
  caller's buffers, no per-op Python and no allocation per call;
- `tessera_graph`, the Plan as JSON (graph/export.py, runtime/plan.py), for loading back from Python.

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
(codegen/abi.py) with the message naming the node that failed. One instance runs one call at a time;
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

from ..backend import Source, functions_of, get_backend
from ..codegen.c_base import STORAGE_C, c_comment, c_string
from ..codegen.c_entry import cpu_check, timer_loop
from ..errors import BuildError, ShapeError, TesseraError
from ..ir.dtype import DataType
from ..ir.names import fresh_name, identifier
from ..runtime.aot_executor import AotExecutor
from ..runtime import cache
from ..runtime.executor import target_path, write_library
from ..runtime.module import Module
from ..runtime.plan import Plan
from .compiler import compiled_of, memory_layout, static_problem
from .export import graph_document
from .ir import Graph
from .kernels import compile_kernels
from .passes.plan_memory import plan_memory

DEFAULT_PREFIX = "tessera_model"
WEIGHT_ALIGN = 64
ERR_LEN = 1024
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


def _weights_c(prefix: str, blob: bytes, digest: str) -> str:
    if not blob:
        return (f"/* the model has no weights */\n"
                f"__attribute__((aligned({WEIGHT_ALIGN}))) const uint8_t {prefix}_weights[1] = {{0}};\n"
                f"const uint64_t {prefix}_weights_size = 0;\n")
    path = _weights_path(digest)
    return "\n".join([
        f"/* the weights: {len(blob)} bytes, sha256 {digest}, embedded in the library's read-only data */",
        "__asm__(",
        f'  ".section .rodata.{prefix}_weights,\\"a\\",@progbits\\n"',
        f'  ".balign {WEIGHT_ALIGN}\\n"',
        f'  ".globl {prefix}_weights\\n"',
        f'  ".type {prefix}_weights, @object\\n"',
        f'  "{prefix}_weights:\\n"',
        f'  ".incbin \\"{path}\\"\\n"',
        f'  ".size {prefix}_weights, .-{prefix}_weights\\n"',
        '  ".previous\\n");',
        f"extern const uint8_t {prefix}_weights[];",
        f"const uint64_t {prefix}_weights_size = {len(blob)}ULL;",
        ""])


# ---------------------------------------------------------------------------------------------
# the model entry points
# ---------------------------------------------------------------------------------------------
def c_names(names) -> list:
    """One distinct C identifier per name, deterministically: the name with every character
    outside [A-Za-z0-9_] made '_' (a leading digit gets 'v_'); a name whose identifier an earlier
    one took gets the first free `_1`, `_2`... that no other name makes on its own."""
    bases = [identifier(n, "v") for n in names]
    own = set(bases)
    used, out = set(), []
    for b in bases:
        name = fresh_name(b, used | own) if b in used else b
        used.add(name)
        out.append(name)
    return out


def _c_type_name(dt) -> str:
    return STORAGE_C[DataType(dt)]


def _entry_source(compiled, prefix, plan, protos, w_offsets) -> str:
    """C of PREFIX_run_with_workspace, the instance functions and the timer."""
    g = compiled.graph
    in_index = {v: i for i, v in enumerate(g.inputs)}
    out_index: dict = {}
    for k, v in enumerate(g.outputs):
        out_index.setdefault(v, k)

    def ptr(v, ctype):
        if v in in_index:
            return f"({ctype})inputs[{in_index[v]}]"
        if v in w_offsets:
            return f"({ctype})(W + {w_offsets[v]})" if w_offsets[v] else f"({ctype})W"
        if v in out_index:
            return f"({ctype})outputs[{out_index[v]}]"
        off = plan[v].offset
        return f"({ctype})(ws + {off})" if off else f"({ctype})ws"

    def where(v):
        if v in in_index:
            return f"input {in_index[v]}"
        if v in w_offsets:
            return f"weights +{w_offsets[v]}"
        if v in out_index:
            return f"output {out_index[v]}"
        return f"arena +{plan[v].offset}"

    n_in, n_out = len(g.inputs), len(g.outputs)
    n_nodes = len(g.nodes)
    body = ["/* the model's one body: PREFIX_run_with_workspace (secs NULL) and PREFIX_run_profiled (secs: the",
            f"   seconds of each of the {n_nodes} node(s) in order, then of the whole call) */",
            "static int32_t tsr_aot_run(void* workspace, const void* const* inputs, void* const* outputs,",
            "                           char* err, int32_t err_len, double* secs) {",
            "  char local_err[256];",
            "  if (err == NULL || err_len <= 0) { err = local_err; err_len = (int32_t)sizeof local_err; }",
            "  err[0] = 0;"]
    if n_in:
        body += ["  if (inputs == NULL) {",
                 f'    snprintf(err, err_len, "{prefix}_run: inputs is NULL; the model takes {n_in} input(s)");',
                 "    return 1;", "  }"]
    body += ["  if (outputs == NULL) {",
             f'    snprintf(err, err_len, "{prefix}_run: outputs is NULL; the model writes {n_out} output(s)");',
             "    return 1;", "  }"]
    for i, name in enumerate(g.input_names):
        body.append(f"  if (inputs[{i}] == NULL) return tsr_aot_null(err, err_len, \"input\", {i}, "
                    f"{c_string(name)});")
    for k, name in enumerate(g.output_names):
        body.append(f"  if (outputs[{k}] == NULL) return tsr_aot_null(err, err_len, \"output\", {k}, "
                    f"{c_string(name)});")
    if plan.arena_bytes:
        body += ["  if (workspace == NULL) {",
                 f'    snprintf(err, err_len, "{prefix}_run: the workspace is NULL; it needs '
                 f'{plan.arena_bytes} bytes");',
                 "    return 1;", "  }"]
    body.append("  uint8_t* const ws = (uint8_t*)workspace;")
    body.append(f"  const uint8_t* const W = {prefix}_weights;")
    body.append("  (void)ws; (void)W;")
    body.append("  int32_t s;")
    body.append("  double t_start = 0.0, t_last = 0.0, t_now;")
    body.append("  if (secs != NULL) t_start = t_last = tsr_aot_now();")
    body.append("  (void)t_start; (void)t_last; (void)t_now;")
    for i, (n, st) in enumerate(zip(g.nodes, compiled.plan.steps)):
        name = st.kernel
        types, has_err = protos[name]
        vals = list(n.inputs) + list(n.outputs)
        if len(types) != len(vals):
            raise BuildError(f"ahead-of-time module: kernel {name} of node {n.name!r} ({n.op}) takes {len(types)} "
                             f"tensors, the node has {len(n.inputs)} inputs and {len(n.outputs)} outputs")
        args = [ptr(v, t) for v, t in zip(vals, types)] + (["err", "err_len"] if has_err else [])
        sig = ", ".join(f"%{v.name}" for v in n.inputs)
        outs = ", ".join(f"%{o.name}: {o.type} at {where(o)}" for o in n.outputs)
        body.append(f"  /* {i}: {c_comment(n.name)} = {c_comment(n.op)}({c_comment(sig)}) -> {c_comment(outs)} */")
        body.append(f"  s = {name}_kernel({', '.join(args)});")
        body.append(f"  if (s != 0) return tsr_aot_failed(s, {c_string(f'{n.name} ({n.op})')}, err, err_len);")
        body.append(f"  if (secs != NULL) {{ t_now = tsr_aot_now(); secs[{i}] = t_now - t_last; t_last = t_now; }}")
    # outputs that no node writes in place: inputs, constants, repeated values
    for k, v in enumerate(g.outputs):
        if out_index[v] == k and v not in in_index and v not in w_offsets:
            continue
        src = ptr(v, "const void*") if (v in in_index or v in w_offsets) else f"(const void*)outputs[{out_index[v]}]"
        nbytes = v.type.nbytes()
        body.append(f"  memcpy(outputs[{k}], {src}, {nbytes});  /* output {k} {c_comment(c_string(g.output_names[k]))}: "
                    f"%{c_comment(v.name)} */")
    body += [f"  if (secs != NULL) secs[{n_nodes}] = tsr_aot_now() - t_start;", "  return 0;", "}", "",
             "TSR_BASELINE",
             f"int32_t {prefix}_run_with_workspace(void* workspace, const void* const* inputs, void* const* outputs,",
             "                                   char* err, int32_t err_len) {",
             "  int32_t cpu = tsr_cpu_check(err, err_len);",
             "  return cpu ? cpu : tsr_aot_run(workspace, inputs, outputs, err, err_len, NULL);",
             "}"]

    helpers = [
        "/* ---- the model entry points (tessera.graph.aot); the exported ones are compiled for the baseline",
        "   x86-64 (TSR_BASELINE) and check first that the CPU has what the kernels use (tsr_cpu_check) ---- */",
        cpu_check(compiled.target),
        "static int32_t tsr_aot_failed(int32_t status, const char* node, char* err, int32_t err_len) {",
        "  char msg[768];",
        "  snprintf(msg, sizeof msg, \"%s\", err[0] ? err : \"the kernel failed\");",
        "  snprintf(err, err_len, \"node %s: %s\", node, msg);",
        "  return status;",
        "}",
        "",
        "static int32_t tsr_aot_null(char* err, int32_t err_len, const char* what, int32_t i, const char* name) {",
        f"  snprintf(err, err_len, \"{prefix}_run: %s %d (%s) is NULL\", what, (int)i, name);",
        "  return 1;",
        "}",
        "",
        "static double tsr_aot_now(void) {",
        "  struct timespec ts;",
        "  clock_gettime(CLOCK_MONOTONIC, &ts);",
        "  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;",
        "}",
        ""]
    arena = plan.arena_bytes
    rounded = (arena + 63) // 64 * 64
    instance = [
        f"struct {prefix} {{",
        "  void* arena;",
        f"  char err[{ERR_LEN}];",
        "};",
        f"typedef struct {prefix} {prefix}_t;",
        f"const uint64_t {prefix}_workspace_size = {arena}ULL;",
        *_entry_record(g, prefix),
        "",
        "TSR_BASELINE",
        f"{prefix}_t* {prefix}_create(void) {{",
        "  if (tsr_cpu_check(NULL, 0)) return NULL;",
        f"  {prefix}_t* m = ({prefix}_t*)calloc(1, sizeof({prefix}_t));",
        "  if (m == NULL) return NULL;",
    ]
    if arena:
        instance += [f"  m->arena = aligned_alloc(64, {rounded}ULL);",
                     "  if (m->arena == NULL) { free(m); return NULL; }"]
    instance += [
        "  return m;",
        "}",
        "",
        "TSR_BASELINE",
        f"void {prefix}_destroy({prefix}_t* m) {{",
        "  if (m == NULL) return;",
        "  free(m->arena);",
        "  free(m);",
        "}",
        "",
        "TSR_BASELINE",
        f"const char* {prefix}_error(const {prefix}_t* m) {{",
        "  static _Thread_local char cpu[512];",
        "  if (m == NULL && tsr_cpu_check(cpu, (int32_t)sizeof cpu)) return cpu;",
        f"  return m == NULL ? \"{prefix}: no model instance (create failed: out of memory?)\" : m->err;",
        "}",
        "",
        "TSR_BASELINE",
        f"int32_t {prefix}_run({prefix}_t* m, const void* const* inputs, void* const* outputs) {{",
        "  if (m == NULL) return 1;",
        f"  return {prefix}_run_with_workspace(m->arena, inputs, outputs, m->err, (int32_t)sizeof m->err);",
        "}",
        "",
        f"/* {prefix}_run with a C timer around each node: secs[0..{n_nodes - 1}] the seconds of each node in",
        f"   execution order, secs[{n_nodes}] those of the whole call (secs holds {n_nodes + 1} doubles) */",
        "TSR_BASELINE",
        f"int32_t {prefix}_run_profiled({prefix}_t* m, const void* const* inputs, void* const* outputs, double* secs) {{",
        "  if (m == NULL) return 1;",
        "  int32_t cpu = tsr_cpu_check(m->err, (int32_t)sizeof m->err);",
        "  if (cpu) return cpu;",
        "  if (secs == NULL) {",
        f"    tsr_baseline_snprintf(m->err, sizeof m->err, \"{prefix}_run_profiled: secs is NULL; it needs {n_nodes + 1} "
        f"doubles\");",
        "    return 1;",
        "  }",
        "  return tsr_aot_run(m->arena, inputs, outputs, m->err, (int32_t)sizeof m->err, secs);",
        "}",
        "",
        "/* the whole model timed inside the library: one warm-up run, then `repeat` measurements of `number`",
        "   runs each (`number` grows until a measurement takes min_repeat_ms); seconds per run in results */",
        "TSR_BASELINE",
        f"int32_t {prefix}_time({prefix}_t* m, const void* const* inputs, void* const* outputs, int32_t number,",
        "                     int32_t repeat, int32_t min_repeat_ms, double* results) {",
        "  if (m == NULL) return 1;",
        "  if (number < 1 || repeat < 1 || results == NULL) {",
        f"    tsr_baseline_snprintf(m->err, sizeof m->err, \"{prefix}_time: number and repeat must be >= 1 and results "
        f"not NULL\");",
        "    return 5;",
        "  }",
        "  int32_t s;",
        *timer_loop(f"if ((s = {prefix}_run(m, inputs, outputs)) != 0) return s", now="tsr_aot_now"),
        "  return 0;",
        "}",
        ""]
    return "\n".join(helpers + body + [""] + instance)


def _entry_record(g: Graph, prefix: str) -> list:
    """C lines of what the entry points take, as the runtime checks a library's tessera_graph against
    them before its first run (runtime/aot_executor.py): the numbers of inputs, outputs and nodes and
    the bytes each input and output buffer holds."""
    def sizes(values):
        return ", ".join(f"{v.type.nbytes()}ULL" for v in values) or "0"

    return [f"const uint32_t {prefix}_num_inputs = {len(g.inputs)}, {prefix}_num_outputs = {len(g.outputs)}, "
            f"{prefix}_num_nodes = {len(g.nodes)};",
            f"const uint64_t {prefix}_input_bytes[] = {{{sizes(g.inputs)}}};",
            f"const uint64_t {prefix}_output_bytes[] = {{{sizes(g.outputs)}}};"]


# ---------------------------------------------------------------------------------------------
# the header
# ---------------------------------------------------------------------------------------------
def header_text(graph: Graph, prefix: str, plan, weights_bytes: int, target) -> str:
    """model.h: the C API of the library and the model's inputs and outputs as macros."""
    P = prefix.upper()
    guard = f"{P}_H_"
    lines = [f"/* {prefix}: graph {c_comment(graph.name)!r} compiled ahead of time by tessera for target",
             f"   {c_comment(target)} (the library runs on CPUs with the same features).",
             "",
             f"   {prefix}_t* m = {prefix}_create();          arena of {P}_WORKSPACE_BYTES allocated once",
             "   const void* inputs[] = {x}; void* outputs[] = {y};",
             f"   if ({prefix}_run(m, inputs, outputs) != 0) fprintf(stderr, \"%s\\n\", {prefix}_error(m));",
             f"   {prefix}_destroy(m);",
             "",
             "   Buffers are compact row-major arrays of the types below, in graph order; they must not",
             "   overlap. A status other than 0: 1 bad argument, 2 dtype, 3 shape, 5 runtime failure (the",
             f"   message, from {prefix}_error, names the node). One instance runs one call at a time.",
             "   Link: gcc main.c -L<dir> -l:<library>.so -Wl,-rpath,<dir>   (the library needs libgomp) */",
             f"#ifndef {guard}",
             f"#define {guard}",
             "#include <stdbool.h>",
             "#include <stddef.h>",
             "#include <stdint.h>",
             "",
             "#ifdef __cplusplus",
             'extern "C" {',
             "#endif",
             "",
             f"#define {P}_NUM_INPUTS {len(graph.inputs)}",
             f"#define {P}_NUM_OUTPUTS {len(graph.outputs)}",
             f"#define {P}_WORKSPACE_BYTES {plan.arena_bytes}ULL  /* the arena (static memory plan) */",
             f"#define {P}_WEIGHTS_BYTES {weights_bytes}ULL  /* embedded in the library */",
             f"#define {P}_NUM_NODES {len(graph.nodes)}  /* {prefix}_run_profiled's secs holds one more */",
             f"#define {P}_OK 0",
             ""]
    for kind, values, names in (("INPUT", graph.inputs, graph.input_names),
                                ("OUTPUT", graph.outputs, graph.output_names)):
        for i, (v, name, ident) in enumerate(zip(values, names, c_names(names))):
            t = v.type
            c = f"{P}_{kind}_{i}"
            lines.append(f"/* {kind.lower()} {i}: {c_comment(c_string(name))}: {t} */")
            lines.append(f"#define {P}_{kind}_INDEX_{ident} {i}")
            lines.append(f"#define {c}_NAME {c_string(name)}")
            lines.append(f"#define {c}_DTYPE \"{t.dtype}\"")
            lines.append(f"typedef {_c_type_name(t.dtype)} {prefix}_{kind.lower()}_{i}_t;")
            lines.append(f"#define {c}_NDIM {t.ndim}")
            if t.ndim:
                lines.append(f"#define {c}_SHAPE {{{', '.join(str(d) for d in t.shape)}}}")
            lines.append(f"#define {c}_NUMEL {t.numel()}")
            lines.append(f"#define {c}_NBYTES {t.nbytes()}")
            lines.append("")
    lines += [f"typedef struct {prefix} {prefix}_t;",
              "",
              "/* a model instance with its arena; NULL when out of memory or when this CPU lacks a feature the",
              f"   library's code uses ({prefix}_error(NULL) names them) */",
              f"{prefix}_t* {prefix}_create(void);",
              f"void {prefix}_destroy({prefix}_t* model);",
              f"/* run the model: 0, or a status with {prefix}_error(model) saying what failed */",
              f"int32_t {prefix}_run({prefix}_t* model, const void* const* inputs, void* const* outputs);",
              f"const char* {prefix}_error(const {prefix}_t* model);",
              f"/* the same without an instance: workspace is the caller's arena of {P}_WORKSPACE_BYTES",
              "   (64-byte aligned), err a buffer for the message */",
              f"int32_t {prefix}_run_with_workspace(void* workspace, const void* const* inputs, void* const* outputs,",
              "                                   char* err, int32_t err_len);",
              f"/* {prefix}_run with a C timer around each node (what exe.profile() reads): secs[i] the seconds of",
              f"   node i in execution order, secs[{P}_NUM_NODES] those of the whole call */",
              f"int32_t {prefix}_run_profiled({prefix}_t* model, const void* const* inputs, void* const* outputs,",
              "                             double* secs);",
              "/* time the model inside the library: seconds per run of `repeat` measurements in results */",
              f"int32_t {prefix}_time({prefix}_t* model, const void* const* inputs, void* const* outputs,",
              "                     int32_t number, int32_t repeat, int32_t min_repeat_ms, double* results);",
              f"extern const uint64_t {prefix}_workspace_size;",
              f"extern const uint8_t {prefix}_weights[];",
              f"extern const uint64_t {prefix}_weights_size;",
              "",
              "#ifdef __cplusplus",
              "}",
              "#endif",
              f"#endif  /* {guard} */",
              ""]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# the library
# ---------------------------------------------------------------------------------------------
def build_library(exe, prefix: str = DEFAULT_PREFIX, aot: bool | None = None,
                  strategy: str = "greedy") -> Library:
    """Compile a compiled graph (a CompiledGraph, or the executor tessera.compile returns) into one
    library (see the module docstring).

    aot: True requires the model entry points (static shapes), False leaves them out, None adds
    them when the shapes are static. strategy: plan_memory's.
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
    parts = [text, "", _weights_c(prefix, blob, digest)]
    if with_entry:
        protos = _prototypes(source, kernels_json) if source is not None else {}
        parts.append(_entry_source(compiled, prefix, plan, protos, w_offsets))
        header = header_text(g, prefix, plan, len(blob), target)
    slot_of = _slots(compiled)
    doc = graph_document(compiled, w_offsets, prefix, len(blob),
                         memory_layout(plan, slot_of) if with_entry else None)
    if with_entry:
        doc["aot"] = {"prefix": prefix, "workspace_bytes": plan.arena_bytes, "strategy": plan.strategy,
                      "plan": plan.as_dict(), "header": header}
    text = json.dumps(doc, separators=(",", ":"))
    parts.append("/* the graph this library runs (tessera.graph.export) */\nconst char tessera_graph[] =\n"
                 + "  " + c_string(text, 100, sep="\n  ") + ";\n")
    # the blob is written (or checked) only when the library is compiled: a cached library needs no blob
    unit = Source("\n".join(parts), source.functions if source else (), target, identifier(g.name),
                  prepare=(lambda: _weights_file(blob, digest)) if blob else None)
    try:
        path = backend.compile(unit)
    except BuildError:
        if not _unschedule_failing(compiled):
            raise
        # a scheduled kernel the C compiler refuses runs unscheduled (as on the graph executor's path)
        return build_library(compiled, prefix, aot, strategy)
    return Library(path, header, doc, plan)


def _unschedule_failing(compiled) -> bool:
    """After the library's unit failed to compile: build each scheduled kernel on its own (the
    graph executor's fall-back replaces one the C compiler refuses by its unscheduled program, with a
    warning); whether any kernel changed."""
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


def build_aot(exe, prefix: str = DEFAULT_PREFIX, strategy: str = "greedy", opt_level=None):
    """The AotExecutor of a compiled graph (static shapes; a CompiledGraph or the executor
    tessera.compile returns): `exe(x)`, `exe.run({...})`, one C call per run."""
    compiled = compiled_of(exe)
    lib = build_library(compiled, prefix, aot=True, strategy=strategy)
    constants = dict(compiled.plan.constants)      # document ids are the plan's slots
    out = AotExecutor(Module(lib.path), lib.doc, Plan.from_document(lib.doc, constants, lib.path))
    out.graph = compiled.graph
    out.compiled = compiled
    out.memory_plan = lib.memory_plan
    out.opt_level = opt_level if opt_level is not None else getattr(exe, "opt_level", None)
    out.kernels = list(compiled.kernels.values())     # the graph Kernels (programs, sources) in first-use order

    def exporter(aot, path, new_prefix):
        path = target_path(path)
        if new_prefix is not None and new_prefix != aot.prefix:
            renamed = build_library(compiled, new_prefix, aot=True, strategy=strategy)
            write_library(renamed.path, renamed.header, path)
        else:
            write_library(aot.library_path, aot.header, path)
        return path

    out.exporter = exporter
    return out
