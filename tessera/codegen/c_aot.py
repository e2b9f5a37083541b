"""The C of a model library's entry points and its header (model.h), rendered from a plain step
list: which kernel each node calls, where each of its tensors lives (a graph input or output, the
embedded weights, the arena), the weights blob to embed. The executor package (executor/library.py)
makes the list from a compiled graph; this module owns how the C API is written, as c_entry.py
owns a kernel's entry and runtime_c/ the fixed C both paste in.

    entry_source(ModelEntry(...))   the model's run body, instance functions, profiled run and timer
    header_text(ModelHeader(...))   model.h: the C API and the model's inputs and outputs as macros
    weights_c(prefix, nbytes, digest, path)   the weights, .incbin'ed from the blob's file
"""
from __future__ import annotations

from dataclasses import dataclass

from ..ir.dtype import DataType
from ..ir.names import fresh_name, identifier
from .c_base import STORAGE_C, c_comment, c_string
from .c_entry import cpu_check, timer_loop

WEIGHT_ALIGN = 64
ERR_LEN = 1024


@dataclass(frozen=True)
class Place:
    """Where a tensor lives during a run: kind "input" / "output" (index), "weights" / "arena" (byte offset)."""

    kind: str
    at: int

    def pointer(self, ctype: str) -> str:
        base = {"input": f"inputs[{self.at}]", "output": f"outputs[{self.at}]"}.get(self.kind)
        if base is not None:
            return f"({ctype}){base}"
        name = "W" if self.kind == "weights" else "ws"
        return f"({ctype})({name} + {self.at})" if self.at else f"({ctype}){name}"

    def describe(self) -> str:
        return {"input": f"input {self.at}", "output": f"output {self.at}", "weights": f"weights +{self.at}",
                "arena": f"arena +{self.at}"}[self.kind]


@dataclass(frozen=True)
class EntryCall:
    """One node's kernel call: its C function `kernel`_kernel, the C pointer type and Place of each
    argument (inputs then outputs), whether it takes (err, err_len); name, op and the texts of the
    comment above it."""

    name: str
    op: str
    kernel: str
    params: tuple
    args: tuple
    takes_err: bool
    inputs_text: str
    outputs_text: str


@dataclass(frozen=True)
class OutputCopy:
    """An output no kernel writes in place (an input, a constant, a repeated value): copied from `src`."""

    index: int
    src: Place
    nbytes: int
    public_name: str
    value_name: str


@dataclass(frozen=True)
class ModelEntry:
    """What the entry points are made of (see the module docstring)."""

    prefix: str
    target: object
    input_names: tuple
    output_names: tuple
    input_bytes: tuple
    output_bytes: tuple
    arena_bytes: int
    calls: tuple
    copies: tuple


@dataclass(frozen=True)
class ModelHeader:
    """What model.h declares: the graph's name, the inputs and outputs as (public name, TensorType)."""

    graph_name: str
    prefix: str
    inputs: tuple
    outputs: tuple
    arena_bytes: int
    weights_bytes: int
    n_nodes: int
    target: str


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


def weights_c(prefix: str, nbytes: int, digest: str, path: str) -> str:
    """The weights as `PREFIX_weights` (64-byte aligned, .incbin'ed from the blob at path) and their size."""
    if not nbytes:
        return (f"/* the model has no weights */\n"
                f"__attribute__((aligned({WEIGHT_ALIGN}))) const uint8_t {prefix}_weights[1] = {{0}};\n"
                f"const uint64_t {prefix}_weights_size = 0;\n")
    return "\n".join([
        f"/* the weights: {nbytes} bytes, sha256 {digest}, embedded in the library's read-only data */",
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
        f"const uint64_t {prefix}_weights_size = {nbytes}ULL;",
        ""])


def _run_body(m: ModelEntry) -> list:
    """tsr_aot_run: the checks of the buffers, then each node's kernel call, then the output copies."""
    prefix = m.prefix
    n_in, n_out, n_nodes = len(m.input_names), len(m.output_names), len(m.calls)
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
    for i, name in enumerate(m.input_names):
        body.append(f"  if (inputs[{i}] == NULL) return tsr_aot_null(err, err_len, \"input\", {i}, "
                    f"{c_string(name)});")
    for k, name in enumerate(m.output_names):
        body.append(f"  if (outputs[{k}] == NULL) return tsr_aot_null(err, err_len, \"output\", {k}, "
                    f"{c_string(name)});")
    if m.arena_bytes:
        body += ["  if (workspace == NULL) {",
                 f'    snprintf(err, err_len, "{prefix}_run: the workspace is NULL; it needs '
                 f'{m.arena_bytes} bytes");',
                 "    return 1;", "  }"]
    body.append("  uint8_t* const ws = (uint8_t*)workspace;")
    body.append(f"  const uint8_t* const W = {prefix}_weights;")
    body.append("  (void)ws; (void)W;")
    body.append("  int32_t s;")
    body.append("  double t_start = 0.0, t_last = 0.0, t_now;")
    body.append("  if (secs != NULL) t_start = t_last = tsr_aot_now();")
    body.append("  (void)t_start; (void)t_last; (void)t_now;")
    for i, c in enumerate(m.calls):
        args = [p.pointer(t) for p, t in zip(c.args, c.params)] + (["err", "err_len"] if c.takes_err else [])
        body.append(f"  /* {i}: {c_comment(c.name)} = {c_comment(c.op)}({c_comment(c.inputs_text)}) -> "
                    f"{c_comment(c.outputs_text)} */")
        body.append(f"  s = {c.kernel}_kernel({', '.join(args)});")
        body.append(f"  if (s != 0) return tsr_aot_failed(s, {c_string(f'{c.name} ({c.op})')}, err, err_len);")
        body.append(f"  if (secs != NULL) {{ t_now = tsr_aot_now(); secs[{i}] = t_now - t_last; t_last = t_now; }}")
    for cp in m.copies:
        body.append(f"  memcpy(outputs[{cp.index}], {cp.src.pointer('const void*')}, {cp.nbytes});  /* output "
                    f"{cp.index} {c_comment(c_string(cp.public_name))}: %{c_comment(cp.value_name)} */")
    body += [f"  if (secs != NULL) secs[{n_nodes}] = tsr_aot_now() - t_start;", "  return 0;", "}", "",
             "TSR_BASELINE",
             f"int32_t {prefix}_run_with_workspace(void* workspace, const void* const* inputs, void* const* outputs,",
             "                                   char* err, int32_t err_len) {",
             "  int32_t cpu = tsr_cpu_check(err, err_len);",
             "  return cpu ? cpu : tsr_aot_run(workspace, inputs, outputs, err, err_len, NULL);",
             "}"]
    return body


def _helpers(m: ModelEntry) -> list:
    return [
        "/* ---- the model entry points (tessera.codegen.c_aot); the exported ones are compiled for the baseline",
        "   x86-64 (TSR_BASELINE) and check first that the CPU has what the kernels use (tsr_cpu_check) ---- */",
        cpu_check(m.target),
        "static int32_t tsr_aot_failed(int32_t status, const char* node, char* err, int32_t err_len) {",
        "  char msg[768];",
        "  snprintf(msg, sizeof msg, \"%s\", err[0] ? err : \"the kernel failed\");",
        "  snprintf(err, err_len, \"node %s: %s\", node, msg);",
        "  return status;",
        "}",
        "",
        "static int32_t tsr_aot_null(char* err, int32_t err_len, const char* what, int32_t i, const char* name) {",
        f"  snprintf(err, err_len, \"{m.prefix}_run: %s %d (%s) is NULL\", what, (int)i, name);",
        "  return 1;",
        "}",
        "",
        "static double tsr_aot_now(void) {",
        "  struct timespec ts;",
        "  clock_gettime(CLOCK_MONOTONIC, &ts);",
        "  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;",
        "}",
        ""]


def _entry_record(m: ModelEntry) -> list:
    """C lines of what the entry points take, as the runtime checks a library's tessera_graph against
    them before its first run (runtime/aot_executor.py): the numbers of inputs, outputs and nodes and
    the bytes each input and output buffer holds."""
    def sizes(nbytes):
        return ", ".join(f"{n}ULL" for n in nbytes) or "0"

    prefix = m.prefix
    return [f"const uint32_t {prefix}_num_inputs = {len(m.input_names)}, {prefix}_num_outputs = "
            f"{len(m.output_names)}, {prefix}_num_nodes = {len(m.calls)};",
            f"const uint64_t {prefix}_input_bytes[] = {{{sizes(m.input_bytes)}}};",
            f"const uint64_t {prefix}_output_bytes[] = {{{sizes(m.output_bytes)}}};"]


def _instance(m: ModelEntry) -> list:
    """The instance functions (create, destroy, error, run), the profiled run and the timer."""
    prefix, arena, n_nodes = m.prefix, m.arena_bytes, len(m.calls)
    rounded = (arena + 63) // 64 * 64
    instance = [
        f"struct {prefix} {{",
        "  void* arena;",
        f"  char err[{ERR_LEN}];",
        "};",
        f"typedef struct {prefix} {prefix}_t;",
        f"const uint64_t {prefix}_workspace_size = {arena}ULL;",
        *_entry_record(m),
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
    return instance


def entry_source(m: ModelEntry) -> str:
    """C of PREFIX_run_with_workspace, the instance functions and the timer."""
    return "\n".join(_helpers(m) + _run_body(m) + [""] + _instance(m))


def _c_type_name(dt) -> str:
    return STORAGE_C[DataType(dt)]


def header_text(h: ModelHeader) -> str:
    """model.h: the C API of the library and the model's inputs and outputs as macros."""
    prefix = h.prefix
    P = prefix.upper()
    guard = f"{P}_H_"
    lines = [f"/* {prefix}: graph {c_comment(h.graph_name)!r} compiled ahead of time by tessera for target",
             f"   {c_comment(h.target)} (the library runs on CPUs with the same features).",
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
             f"#define {P}_NUM_INPUTS {len(h.inputs)}",
             f"#define {P}_NUM_OUTPUTS {len(h.outputs)}",
             f"#define {P}_WORKSPACE_BYTES {h.arena_bytes}ULL  /* the arena (static memory plan) */",
             f"#define {P}_WEIGHTS_BYTES {h.weights_bytes}ULL  /* embedded in the library */",
             f"#define {P}_NUM_NODES {h.n_nodes}  /* {prefix}_run_profiled's secs holds one more */",
             f"#define {P}_OK 0",
             ""]
    for kind, tensors in (("INPUT", h.inputs), ("OUTPUT", h.outputs)):
        names = [name for name, _ in tensors]
        for i, ((name, t), ident) in enumerate(zip(tensors, c_names(names))):
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


__all__ = ["EntryCall", "ModelEntry", "ModelHeader", "OutputCopy", "Place", "c_names", "entry_source",
           "header_text", "weights_c", "ERR_LEN", "WEIGHT_ALIGN"]
