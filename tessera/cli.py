"""The `tessera` command line.

    tessera demo                                   compile, run, check and time a built-in TE program
    tessera demo --model resnet18                  ... or a built-in model from tessera.zoo (no download)
    tessera demo --vdla                            an int8 conv layer on the VDLA accelerator: its
                                                   instruction stream and simulated cycles
    tessera compile model.onnx -o model.so         ONNX -> one deployable library (+ its C header model.h)
    tessera compile model.pt2 -o model.so          ... or a program saved by torch.export.save
    tessera run model.so|model.onnx --input x.npy  run it; print or save (--output) the outputs
    tessera check model.onnx                       list every op tessera cannot convert (exit 1 if any)
    tessera show model.onnx                        the graph as tessera optimizes it (fused functions), as text
    tessera report model.onnx [--db tune.jsonl] -o report.html
                                                   one HTML page: the optimized graph coloured by measured
                                                   time, each kernel's code, the memory plan, the tuning
    tessera bench model.onnx [--threads N]         latency beside ONNX Runtime in the same run
    tessera tune model.onnx --trials N --db tune.jsonl [--resume] [--time-budget 30m] [--pool tls://host:8786 ...]
                                                   tune every kernel of the model (a live table of tasks),
                                                   then compile|run|bench ... --db tune.jsonl use the records
    tessera quantize model.onnx --calib DIR -o model_int8.onnx [--method minmax|percentile|entropy]
                                                   post-training int8, calibrated on DIR's inputs (one .npy a
                                                   sample of a one-input model, or one .npz a sample with an
                                                   array per input name): a QDQ ONNX model any runtime reads
    tessera generate model.onnx --prompt-ids 1,2,3 --max-new-tokens 64 [--int8-weights] [--top-k 50 --seed 0]
                                                   a decoder language model token by token over a KV cache:
                                                   the new tokens, ms/token and tokens/s
    tessera cache info | prune [--max-size 2G] | clear
                                                   the compiled-kernel cache: its size and cap, evict the
                                                   least recently used now, or empty it
    (a zoo model name such as resnet18 is accepted wherever a model.onnx is)

Errors print `tessera: error: ...` and exit with status 2; warnings `tessera: warning: ...`; Ctrl-C
`tessera: interrupted`, status 130. A command that compiles says on stderr what it is doing once it has
run 2 s (tessera/progress.py; `--quiet` silences it).
"""
from __future__ import annotations

import argparse
import os
import re
import shlex
import sys
import time
import warnings

import tessera
from tessera import te, zoo

from . import autotune, progress
from .accel.vdla import layers as vdla_layers
from .autotune.curve import plot_tuning_curve, tuning_curve
from .autotune.graph_progress import GraphTuneTable, format_duration
from .autotune.measure.dask import check_pool_address, pool_security
from .autotune.scheduler import pretrain_from
from .autotune.tune import graph_timing, weights_outgrow_cache
from .errors import TesseraError
from .frontend.onnx import check_model, from_onnx, load_model
from .frontend.onnx_export import DEFAULT_OPSET, export_onnx
from .frontend.torch import from_exported_program, load_program
from .generation.command import run_generate
from .graph import DeferredGraph
from .graph.document import load_graph
from .graph.ir import FUSED_OP
from .graph.lowering import static_problem
from .graph.passes import optimized_graph
from .report.inputs import sample_inputs
from .ir.names import fresh_name
from .runtime import cache as kernel_cache
from .runtime.contention import WaitMeter, busy_reason
from .runtime.executor import Executor, header_path
from .runtime.library import load_module
from .target import Target
from .zoo import list_models


def _demo(args) -> int:
    import numpy as np

    if getattr(args, "model", None):
        return _demo_model(args)
    if getattr(args, "vdla", False):
        return _demo_vdla()

    n, m, k = args.size, args.size, args.size
    print(f"tessera demo: C = A @ B with M=N=K={n} (float32), symbolic M")
    M = te.var("M")
    A = te.placeholder((M, k), name="A")
    B = te.placeholder((k, m), name="B")
    r = te.reduce_axis((0, k), name="k")
    C = te.compute((M, m), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    t0 = time.perf_counter()
    func = te.create_prim_func([A, B, C])
    lib = tessera.build(func, target=args.target)
    build_ms = (time.perf_counter() - t0) * 1e3
    rng = np.random.default_rng(0)
    a = tessera.nd.array(rng.standard_normal((n, k), dtype=np.float32))
    b = tessera.nd.array(rng.standard_normal((k, m), dtype=np.float32))
    c = tessera.nd.empty((n, m), "float32")
    lib(a, b, c)
    ref = a.numpy() @ b.numpy()
    err = float(np.max(np.abs(c.numpy() - ref)))
    ok = np.allclose(c.numpy(), ref, rtol=1e-4, atol=1e-3)
    print("\n--- the program (TensorIR) ---")
    print(func.script())
    print("--- the generated C ---")
    print(lib.get_source())
    res = lib.time_evaluator(number=3, repeat=3)(a, b, c)
    gflops = 2 * n * m * k / res.median / 1e9
    print(f"--- result ---\ncompile (TE -> .so): {build_ms:.1f} ms   max |error| vs numpy: {err:.2e}   "
          f"{'OK' if ok else 'MISMATCH'}")
    print(f"unscheduled kernel: {res.median * 1e3:.3f} ms median ({gflops:.2f} GFLOPS); "
          f"the schedule primitives (tir.Schedule) make it fast")
    return 0 if ok else 1


def _demo_vdla() -> int:
    """`tessera demo --vdla`: an int8 3x3 conv (64 -> 64 channels, 14x14) compiled for VDLA with two
    virtual threads: the disassembled stream, then simulated cycles beside the serial stream."""
    import numpy as np

    s = vdla_layers.Conv2DShape(1, 64, 14, 14, 64, 3, 3, 1, 1)
    func = vdla_layers.conv2d_packed(s, shift=8, relu=True)
    sched = dict(tile_h=7, tile_co=2, tile_ci=2, vthread_axis="co")
    print("tessera demo --vdla: int8 conv2d 64x14x14 -> 64, 3x3, pad 1, relu, requantized by >> 8")
    rng = np.random.default_rng(0)
    x = rng.integers(-128, 128, (1, 64, 14, 14), dtype=np.int8)
    w = rng.integers(-128, 128, (64, 64, 3, 3), dtype=np.int8)
    ref = vdla_layers.conv2d_reference(x, w, None, s, 8, True)
    reports, ok = {}, True
    for label, vt, target in (("serial", 1, "vdla -sync=serial"), ("2 virtual threads", 2, "vdla")):
        mod = tessera.build(vdla_layers.schedule_conv2d(func, vthreads=vt, **sched), target=target)
        out = np.zeros((1, 4, 14, 14, 1, 16), np.int8)
        mod(vdla_layers.pack_data(x), vdla_layers.pack_weight(w), out)
        ok &= bool((vdla_layers.unpack_data(out) == ref).all())
        reports[label] = mod.last_report
    print("--- the instruction stream (2 virtual threads) ---")
    print(mod.get_source())
    print("--- result (cycle-approximate simulator) ---")
    for label, rep in reports.items():
        print(f"{label:>18}: {rep}")
    print(f"bit-identical to the NumPy int8 reference: {'OK' if ok else 'MISMATCH'}")
    return 0 if ok else 1


def _add_disable_pass_option(p) -> None:
    p.add_argument("--disable-pass", action="append", metavar="PASS",
                   help="leave this graph pass out (repeatable), e.g. winograd: a library about the size of the "
                        "ONNX weights, with slower 3x3 convolutions (docs/deploying.md, 'Library size')")


def _disabled_passes(args) -> tuple:
    return tuple(getattr(args, "disable_pass", None) or ())


def _add_quiet_option(p) -> None:
    p.add_argument("-q", "--quiet", action="store_true",
                   help="no progress lines (shown on stderr when compiling takes more than 2 s)")


def _add_demo_model_option(demo) -> None:
    demo.add_argument("--model", metavar="NAME", choices=list_models(),
                      help=f"instead, compile and run a built-in model (no download): {', '.join(list_models())}")


def _demo_model(args) -> int:
    """`tessera demo --model NAME`: a zoo model -> from_onnx -> compile -> run, checked against onnxruntime."""
    import numpy as np

    try:
        import onnx  # noqa: F401
    except ImportError:
        raise tessera.TesseraError("tessera demo --model needs the onnx package: pip install -e \".[dev]\"") from None
    info = zoo.model_info(args.model)
    print(f"tessera demo: {args.model}, {info.summary}; seeded random weights, built offline by tessera.zoo")
    t0 = time.perf_counter()
    with progress.stage(f"building {args.model} (ONNX)"):
        model = zoo.get_model(args.model)
        inputs = zoo.sample_input(args.model)
    n_params = sum(int(np.prod(t.dims)) for t in model.graph.initializer)
    print(f"model: {len(model.graph.node)} ONNX nodes (opset 17), {n_params / 1e6:.1f}M weights, "
          f"built in {time.perf_counter() - t0:.1f} s")
    t0 = time.perf_counter()
    with progress.stage(f"converting {args.model} from ONNX"):
        graph, params = tessera.frontend.from_onnx(model)
    exe = tessera.compile(graph, params, target=args.target)
    with progress.stage("first run"):
        outs = exe.run(inputs)                   # the first run loads every kernel
    print(f"compile: from_onnx + tessera.compile + first run {time.perf_counter() - t0:.1f} s: "
          f"{len(exe.graph.nodes)} graph nodes, {len(exe.kernels)} distinct kernels, target {exe.target}")
    for spec in info.inputs:
        print(f"  input  {spec.name}: {spec.dtype}{list(spec.shape)}")
    for spec, y in zip(info.outputs, outs):
        print(f"  output {spec.name}: {y.dtype}{list(y.shape)}  mean {float(y.mean()):+.4f}  std {float(y.std()):.4f}")
    times, busy = _timed(lambda: exe.run(inputs), 3)
    ms = float(np.median(times)) * 1e3
    try:
        import onnxruntime as ort
    except ImportError:
        print(f"latency: tessera {ms:.2f} ms (median of 3); onnxruntime is not installed, so no reference check"
              + (f"\nnote: the machine was busy while timing ({busy})" if busy else ""))
        return 0
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    ref = sess.run(None, inputs)
    ort_times, ort_busy = _timed(lambda: sess.run(None, inputs), 3)
    ort_ms = float(np.median(ort_times)) * 1e3
    err = max(float(np.max(np.abs(y - r))) for y, r in zip(outs, ref))
    ok = all(np.allclose(y, r, rtol=1e-4, atol=1e-4) for y, r in zip(outs, ref))
    print(f"--- result ---\nmax |error| vs onnxruntime: {err:.2e}   {'OK' if ok else 'MISMATCH'} (rtol = atol = 1e-4)")
    print(f"latency: tessera {ms:.2f} ms, onnxruntime {ort_ms:.2f} ms (medians of 3): "
          + _ratio_text(busy, ort_busy, f"{ms / ort_ms:.1f}x (`python benchmarks/e2e.py` compares properly)"))
    print(f"tuning: {exe.tuning}")
    return 0 if ok else 1


# ---------------------------------------------------------------------------------------------
# models
# ---------------------------------------------------------------------------------------------
def _parse_shapes(items) -> dict:
    """--shape name=1,3,224,224 (a dimension may be a symbol name or -1) -> {name: tuple}."""
    out = {}
    for item in items or ():
        name, sep, dims = item.rpartition("=")
        if not sep or not name:
            raise TesseraError(f"--shape {item!r}: expected NAME=D0,D1,... (e.g. input=1,3,224,224)")
        shape = []
        for d in filter(None, (x.strip() for x in dims.split(","))):
            try:
                shape.append(int(d))
            except ValueError:
                shape.append(d)
        out[name] = tuple(shape)
    return out


def _target(args):
    text = args.target
    threads = getattr(args, "threads", None)
    if threads:
        text += f" -num-threads={threads}"
    return Target(text)


def _model_source(name: str):
    """An ONNX file path, or the ModelProto of the zoo model `name` (no file of that name exists)."""
    if os.path.isfile(name):
        return name
    if name in list_models():
        return zoo.get_model(name)
    raise TesseraError(f"no such file: {name} (nor a built-in model: {', '.join(list_models())})")


def _is_model(name: str) -> bool:
    """An .onnx path or a zoo model name (compiled from ONNX, so --db and onnxruntime apply)."""
    return _is_onnx(name) or (not os.path.isfile(name) and name in list_models())


def _load_model_executable(path, args):
    """tessera.compile of the model at `path` (an ONNX file or zoo name, or a .pt2 program; _model_graph)
    with the command's target, opt level, --db and --disable-pass."""
    graph, params = _model_graph(path, args)
    db = getattr(args, "db", None)
    exe = tessera.compile(graph, params, target=_target(args), opt_level=args.opt_level, database=db,
                          disabled_passes=_disabled_passes(args))
    if db is not None:
        print(f"tuning: {exe.tuning}")
    return exe


def _is_onnx(path: str) -> bool:
    return path.lower().endswith(".onnx")


def _is_program(path: str) -> bool:
    """A program saved by torch.export.save."""
    return path.lower().endswith(".pt2")


def _load_any(path, args):
    if _is_model(path) or _is_program(path):
        return _load_model_executable(path, args)
    if not os.path.isfile(path):
        raise TesseraError(f"no such file: {path}")
    if getattr(args, "db", None) is not None:
        raise TesseraError(f"--db applies when compiling an ONNX model; {path} is compiled already (compile it "
                           f"with the records: `tessera compile model.onnx --db {args.db} -o {path}`)")
    exe = load_module(path)
    if not isinstance(exe, Executor):
        raise TesseraError(f"{path} is a kernel library, not a compiled model; make one with "
                           f"`tessera compile model.onnx -o {os.path.basename(path)}`")
    return exe


def _read_npy(path: str, expects: str = ""):
    """The array in the .npy file `path`; anything else (a raw .bin, a pickle, text) is refused,
    saying what the input (`expects`, e.g. "input 'x' expects float32[1, 3, 224, 224]") takes."""
    import numpy as np

    if not os.path.isfile(path):
        raise TesseraError(f"input file {path} does not exist")
    hint = f"; {expects}" if expects else ""
    with open(path, "rb") as f:
        magic = f.read(6)
    if magic != b"\x93NUMPY":
        raise TesseraError(f"input file {path} is not a .npy array (no .npy header; {os.path.getsize(path)} bytes)"
                           f"{hint}: save it with numpy.save (a raw file: np.save('x.npy', np.fromfile("
                           f"{path!r}, dtype).reshape(shape)))")
    try:
        return np.load(path, allow_pickle=False)
    except (ValueError, OSError) as e:
        raise TesseraError(f"cannot read {path} as a .npy array: {e}{hint}") from None


def split_input(item: str, names) -> tuple:
    """(input name, file) of `--input NAME=FILE`, or (None, item) for a positional FILE.

    A name may itself hold '=' or ':' (ONNX names such as "gpu_0/data_0" or "x=1:0"): the item is
    split at each '=' from the right, and the first split whose left part is one of the model's
    input names wins (the longest such name); with none, an item that is an existing file is
    positional, and any other item with '=' is an error naming the model's inputs."""
    cut = len(item)
    while True:
        cut = item.rfind("=", 0, cut)
        if cut <= 0:
            break
        if item[:cut] in names:
            return item[:cut], item[cut + 1:]
    if "=" in item and not os.path.isfile(item):
        raise TesseraError(f"--input {item!r}: the model has no input {item.partition('=')[0]!r} (nor one named "
                           f"like any longer part before an '='); its inputs are {list(names)}")
    return None, item


def _input_arrays(exe, items) -> dict:
    """--input x.npy (positional, graph input order) / --input NAME=x.npy -> {public name: array}."""
    names = list(exe.input_names)
    types = {n: _type_text(v) for n, v in zip(names, exe.inputs)}
    out, pos = {}, 0
    for item in items or ():
        key, path = split_input(item, names)
        if key is None:
            while pos < len(names) and names[pos] in out:
                pos += 1
            if pos >= len(names):
                raise TesseraError(f"--input {item!r}: the model takes {len(names)} inputs ({names})")
            key = names[pos]
        if key in out:
            raise TesseraError(f"input {key!r} is given twice")
        out[key] = _read_npy(path, f"input {key!r} expects {types.get(key, 'an array')}")
    return out


def _type_text(value) -> str:
    """An input's type (a runtime TensorSpec) as 'float32[1, 3, 224, 224]' (symbolic dims by name); a
    sequence or optional input's type as it prints ('sequence<float32[N]>')."""
    if not hasattr(value, "shape"):
        return str(value)
    return f"{value.dtype}[{', '.join(str(d) for d in value.shape)}]"


def _random_inputs(exe, symbol_value=1):
    """Seeded inputs of exe's types for `tessera bench` (report/inputs.py's sample_inputs, integers 0..3)."""
    for name, v in zip(exe.input_names, exe.inputs):
        if not hasattr(v, "shape"):
            raise TesseraError(f"input {name!r} is a {v}: the command line feeds tensors only; run the model "
                               f"from Python (exe.run({{{name!r}: [array, ...]}}))")
    return sample_inputs(exe, symbol_value, int_high=4)


def _compile(args) -> int:
    if not _is_model(args.model) and not _is_program(args.model):
        raise TesseraError(f"tessera compile takes an ONNX model (.onnx), a program saved by torch.export.save "
                           f"(.pt2) or a built-in model name, got {args.model}")
    if (_is_onnx(args.model) or _is_program(args.model)) and not os.path.isfile(args.model):
        raise TesseraError(f"no such file: {args.model}")
    t0 = time.perf_counter()
    exe = _load_model_executable(args.model, args)
    t1 = time.perf_counter()
    out = args.output or os.path.splitext(args.model)[0] + ".so"
    with progress.stage(f"writing {out}"):
        path = exe.export_library(out)
    g = exe.graph
    print(f"compiled {args.model}: {len(g.nodes)} nodes, {len(exe.kernels)} kernels, {len(g.constants)} "
          f"constants ({time.perf_counter() - t0:.1f} s; graph + kernels {t1 - t0:.1f} s)")
    print("inputs:  " + ", ".join(f"{n}: {v.type}" for n, v in zip(g.input_names, g.inputs)))
    print("outputs: " + ", ".join(f"{n}: {v.type}" for n, v in zip(g.output_names, g.outputs)))
    why = static_problem(g)
    if why is None:
        print(f"wrote {path} (weights embedded) and its C API {header_path(path)}")
    else:
        print(f"wrote {path} (weights embedded); no C API: {why} (fix the shapes with --shape NAME=D0,D1,...)")
    return 0


def _run(args) -> int:
    import numpy as np

    exe = _load_any(args.model, args)
    inputs = _input_arrays(exe, args.input)
    missing = [n for n in exe.input_names if n not in inputs]
    if missing:
        raise TesseraError(f"give every model input with --input: missing {missing} (inputs: "
                           f"{[f'{n}: {v}' for n, v in zip(exe.input_names, exe.inputs)]})")
    t0 = time.perf_counter()
    outs = exe.run(inputs)
    ms = (time.perf_counter() - t0) * 1e3
    names = list(exe.output_names)
    paths = list(args.output or ())
    if len(paths) == 1 and len(outs) > 1:
        if not paths[0].endswith(".npz"):
            raise TesseraError(f"the model has {len(outs)} outputs ({names}); give --output once per output "
                               f"or one .npz file")
        np.savez(paths[0], **{n: o for n, o in zip(_unique(names), outs)})
        print(f"wrote {len(outs)} outputs to {paths[0]}")
    elif paths:
        if len(paths) != len(outs):
            raise TesseraError(f"{len(paths)} --output files for {len(outs)} outputs ({names})")
        for p, o in zip(paths, outs):
            np.save(p, o, allow_pickle=False)
            print(f"wrote {p}: {o.dtype}{list(o.shape)}")
    else:
        with np.printoptions(threshold=20, edgeitems=3, precision=5):
            for n, o in zip(names, outs):
                print(f"{n}: {o.dtype}{list(o.shape)}")
                print(o)
    print(f"ran in {ms:.2f} ms")
    return 0


def _unique(names):
    """One distinct key per output name (an .npz holds each name once)."""
    taken, out = set(), []
    for n in names:
        out.append(fresh_name(n, taken))
        taken.add(out[-1])
    return out


def _check(args) -> int:
    m = load_model(_model_source(args.model))
    problems = check_model(m, shape_dict=_parse_shapes(args.shape))
    n = len(m.graph.node)
    if n == 0:
        raise TesseraError(f"{args.model}: the model's graph has no nodes, so there is nothing to check")
    if not problems:
        print(f"{args.model}: all {n} nodes are supported")
        return 0
    print(f"{args.model}: {len(problems)} of {n} nodes cannot be converted:")
    for p in problems:
        print(f"  {p.op_type:<22} node {p.node!r} (opset {p.opset}): {p.reason}")
    kinds = sorted({p.op_type for p in problems})
    print(f"unsupported op types: {', '.join(kinds)}")
    return 1


CALIB_HELP = ("a folder of calibration inputs: for a model with one input, each .npy file is one sample of it "
              "(any file name); otherwise each .npz file is one sample holding an array per input, saved under "
              "the input's name (np.savez('s0.npz', **{'input_ids': ids, 'attention_mask': mask})). Files are "
              "read in name order; shapes and dtypes must be the model's")


def _runtime_inputs(graph, params) -> dict:
    """{public name: TensorType} of the graph inputs that params do not bind (what a run feeds)."""
    bound = set(params or ())
    return {name: v.type for v, name in zip(graph.inputs, graph.input_names)
            if name not in bound and v.name not in bound}


def _check_calib_array(path: str, name: str, arr, want) -> None:
    _check_calib_header(path, name, tuple(arr.shape), arr.dtype, want)


def _check_calib_header(path: str, name: str, shape: tuple, dtype, want) -> None:
    """Refuse an array of `shape` and `dtype` (read or as its .npy header says) for input `name` of
    TensorType `want`, naming the file."""
    got = f"{dtype}[{', '.join(str(d) for d in shape)}]"
    expects = f"input {name!r} expects {want}"
    if str(dtype) != str(want.dtype):
        raise TesseraError(f"calibration file {path}: {expects}, the file holds {got} (convert it: "
                           f"arr.astype('{want.dtype}'))")
    if len(shape) != len(want.shape) or any(isinstance(d, int) and d != n for d, n in zip(want.shape, shape)):
        raise TesseraError(f"calibration file {path}: {expects}, the file holds {got}")


def _npz_member(z, name: str) -> str:
    """The one archive member holding array `name` of an open NpzFile ("name.npy" or "name"): the
    header checked and the data read come from the same member (an archive holding both would let
    np.load's lookup read another than the one checked)."""
    members = [m for m in z.zip.namelist() if m in (name, name + ".npy")]
    if len(members) != 1:
        raise ValueError(f"array {name!r} is stored {len(members)} times in the archive ({members})")
    return members[0]


def _npz_member_header(z, member: str) -> tuple:
    """(shape, dtype) of an archive member from its .npy header alone: a member is checked before it
    is decompressed (a small archive may hold an array of any size)."""
    import numpy as np

    with z.zip.open(member) as f:
        version = np.lib.format.read_magic(f)
        read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, _, dtype = read(f)
    return shape, dtype


def _calibration_files(folder: str) -> list:
    """The paths of `tessera quantize --calib DIR`'s sample files (CALIB_HELP), in name order; a folder that
    is missing, empty or mixes .npy and .npz files is refused."""
    if not os.path.isdir(folder):
        raise TesseraError(f"--calib {folder}: no such folder ({CALIB_HELP})")
    files = sorted(f for f in os.listdir(folder) if f.lower().endswith((".npy", ".npz"))
                   and os.path.isfile(os.path.join(folder, f)))
    if not files:
        raise TesseraError(f"--calib {folder}: the folder holds no .npy or .npz files ({CALIB_HELP})")
    if len({os.path.splitext(f)[1].lower() for f in files}) > 1:
        raise TesseraError(f"--calib {folder}: the folder mixes .npy and .npz files; use one kind ({CALIB_HELP})")
    return [os.path.join(folder, f) for f in files]


def _calibration_samples(files, inputs: dict) -> list:
    """The samples in `files` (_calibration_files), each {input name: array}; `inputs`: {name: TensorType} of
    the model's runtime inputs. A file that is not an array, or an array of another shape, dtype or
    name, is refused, naming the file."""
    import zipfile

    import numpy as np

    names = list(inputs)
    samples = []
    for path in files:
        if path.lower().endswith(".npy"):
            if len(names) != 1:
                raise TesseraError(f"calibration file {path}: a .npy file holds one array, but the model takes "
                                   f"{len(names)} inputs ({names}); give one .npz file per sample with an array "
                                   f"per input name")
            arr = _read_npy(path, f"input {names[0]!r} expects {inputs[names[0]]}")
            _check_calib_array(path, names[0], arr, inputs[names[0]])
            samples.append({names[0]: arr})
            continue
        try:
            z = np.load(path, allow_pickle=False)
        except (ValueError, OSError, EOFError, zipfile.BadZipFile) as e:
            raise TesseraError(f"cannot read calibration file {path} as a .npz archive of arrays: {e}") from None
        if not isinstance(z, np.lib.npyio.NpzFile):       # a .npy file named .npz: np.load gives its array
            raise TesseraError(f"calibration file {path} is one .npy array, not a .npz archive of arrays per "
                               f"input name ({CALIB_HELP})")
        with z:
            # the names first, from the archive's listing: no array is read before they are right
            unknown = sorted(set(z.files) - set(names))
            if unknown:
                raise TesseraError(f"calibration file {path}: {unknown} are not inputs of the model (its inputs: "
                                   f"{names})")
            missing = [n for n in names if n not in z.files]
            if missing:
                raise TesseraError(f"calibration file {path} lacks the input(s) {missing} (the model's inputs: "
                                   f"{names})")
            try:
                members = {n: _npz_member(z, n) for n in names}
                for n in names:      # shapes and dtypes from the headers, before any array is decompressed
                    shape, dtype = _npz_member_header(z, members[n])
                    if dtype.hasobject:
                        raise ValueError(f"array {n!r} holds Python objects, which need pickle (never loaded)")
                    _check_calib_header(path, n, shape, dtype, inputs[n])
                data = {}
                for n in names:      # the data of the member whose header was checked
                    with z.zip.open(members[n]) as f:
                        data[n] = np.lib.format.read_array(f, allow_pickle=False)
            except (ValueError, OSError, EOFError, zipfile.BadZipFile) as e:
                raise TesseraError(f"cannot read calibration file {path} as a .npz archive of arrays: {e}") from None
        for n in names:
            _check_calib_array(path, n, data[n], inputs[n])
        samples.append(data)
    return samples


def _quantize(args) -> int:
    """`tessera quantize MODEL --calib DIR -o OUT.onnx`: tessera.quantize(form="qdq") of the model, calibrated
    on DIR's samples, written as a QDQ ONNX model (frontend/onnx_export.py)."""
    import numpy as np

    if not _is_model(args.model):
        raise TesseraError(f"tessera quantize takes an ONNX model (.onnx) or a built-in model name, "
                           f"got {args.model}")
    if _is_onnx(args.model) and not os.path.isfile(args.model):
        raise TesseraError(f"no such file: {args.model}")
    if args.percentile is not None and args.method != "percentile":
        raise TesseraError(f"--percentile applies to --method percentile (the method is {args.method})")
    out = args.output or os.path.splitext(os.path.basename(args.model))[0] + "_int8.onnx"
    if os.path.isfile(args.model) and os.path.abspath(out) == os.path.abspath(args.model):
        raise TesseraError(f"-o {out} is the model itself; write the int8 model to another file")
    files = _calibration_files(args.calib)
    graph, params = _model_graph(args.model, args)
    if isinstance(graph, DeferredGraph):
        raise TesseraError(f"{args.model}: its graph depends on input values, so it is built per value at the first "
                           f"run; fix them with --shape to quantize it")
    samples = _calibration_samples(files, _runtime_inputs(graph, params))
    per_channel = not args.no_per_channel
    with progress.stage(f"calibrating on {len(samples)} samples ({args.method})"):
        qdq = tessera.quantize(graph, params, calibration=samples, method=args.method, per_channel=per_channel,
                               skip=args.skip or (), form="qdq",
                               **({} if args.percentile is None else {"percentile": args.percentile}))
    with progress.stage(f"writing {out}"):
        path = export_onnx(qdq, out, opset=args.opset,
                           doc_string=f"tessera quantize {os.path.basename(args.model)}: {args.method}, "
                                      f"{'per-channel' if per_channel else 'per-tensor'} int8 weights")
    import onnx

    try:
        onnx.checker.check_model(path)
    except onnx.checker.ValidationError as e:
        raise TesseraError(f"the written model {path} fails onnx.checker (a bug of the ONNX export; please "
                           f"report it): {e}") from None
    dq = [n for n in qdq.nodes if n.op == "qnn.dequantize"]
    weights = sum(1 for n in dq if n.inputs[0] in qdq.constants)
    acts = sum(1 for n in qdq.nodes if n.op == "qnn.quantize")
    fp32 = sum(np.asarray(a).nbytes for a in (params or {}).values())
    size = os.path.getsize(path) + (os.path.getsize(path + ".data") if os.path.isfile(path + ".data") else 0)
    print(f"quantized {args.model} on {len(samples)} calibration samples ({args.method}): {weights} int8 weight "
          f"tensors ({'per channel' if per_channel else 'per tensor'}), {acts} uint8 activations")
    print(f"wrote {path}: a QDQ ONNX model (opset {args.opset}), {size / 1e6:.1f} MB (fp32 weights "
          f"{fp32 / 1e6:.1f} MB)")
    return 0


def _model_graph(path, args):
    """(graph, params) of the model at `path`: an ONNX file or zoo name (--shape fixes dimensions), or a
    .pt2 program saved by torch.export.save."""
    if _is_program(path):
        if getattr(args, "shape", None):
            raise TesseraError(f"--shape applies to ONNX models; {path}'s shapes are the exported program's "
                               f"(torch.export.Dim gives symbolic ones)")
        with progress.stage(f"converting {path} (torch.export)"):
            return from_exported_program(load_program(path))
    with progress.stage(f"converting {path} from ONNX"):
        return from_onnx(_model_source(path), shape_dict=_parse_shapes(getattr(args, "shape", None)))


def _show(args) -> int:
    """`tessera show MODEL`: the graph as tessera.compile optimizes it (fused functions, layouts), as text;
    a compiled library's graph as it was built."""
    if _is_model(args.model) or _is_program(args.model):
        graph, params = _model_graph(args.model, args)
        if isinstance(graph, DeferredGraph):
            raise TesseraError(f"{args.model}: its graph depends on input values, so it is built per value at the "
                               f"first run; fix them with --shape to show it")
        g = optimized_graph(graph, params, _target(args), args.opt_level, _disabled_passes(args))
        how = f"optimized for {_target(args)} at opt level {args.opt_level}"
    else:
        g = load_graph(_load_any(args.model, args))
        how = "as compiled into the library"
    print(g.script())
    fused = sum(1 for n in g.nodes if n.op == FUSED_OP)
    print(f"\n# {args.model}: {len(g.nodes)} nodes ({fused} fused), {len(g.constants)} constants, {how}")
    return 0


def _bench(args) -> int:
    import numpy as np

    exe = _load_any(args.model, args)
    inputs = _random_inputs(exe, args.symbol_value)
    shapes = ", ".join(f"{k}: {v.dtype}{list(v.shape)}" for k, v in inputs.items())
    print(f"{args.model}: {len(exe.plan.steps)} nodes, inputs {shapes}, {args.threads or 'all'} threads")
    for _ in range(args.warmup):
        outs = exe.run(inputs)
    times, busy = _timed(lambda: exe.run(inputs), args.repeat)
    ts_ms = float(np.median(times)) * 1e3
    report = exe.profile(inputs, number=max(1, args.number), repeat=3, show=args.profile)
    print(f"tessera      end to end {ts_ms:9.3f} ms (median of {args.repeat} runs)   kernels {report.total_ms:9.3f} ms "
          f"(sum of per-node C timers)")
    if report.call_ms is not None:
        print(f"             profiled call {report.call_ms:9.3f} ms = nodes {report.total_ms:.3f} + outside the kernels "
              f"{report.outside_ms:.3f} ms ({'; '.join(f'{w} {ms:.3f}' for w, _, ms in report.outside)})")
    ort = _ort_latency(args, inputs, outs, list(exe.output_names)) if _is_model(args.model) else None
    if ort is not None:
        ort_ms, ort_busy = ort
        print(f"onnxruntime  end to end {ort_ms:9.3f} ms (median of {args.repeat} runs)")
        ratio = f"{ts_ms / ort_ms:.2f}x end to end, {report.total_ms / ort_ms:.2f}x kernels only"
        print(f"ratio tessera / onnxruntime: {_ratio_text(busy, ort_busy, ratio)}")
        return 0
    if busy is not None:
        print(f"note: the machine was busy while timing ({busy}): rerun on a quiet machine")
    if _is_model(args.model):
        print("onnxruntime is not installed: no reference latency")
    return 0


def _timed(run, repeat: int) -> tuple:
    """(seconds of each of `repeat` calls of run(), why the machine was busy meanwhile or None)."""
    times = []
    with WaitMeter() as meter:
        for _ in range(repeat):
            t0 = time.perf_counter()
            run()
            times.append(time.perf_counter() - t0)
    return times, busy_reason(times, meter)


def _ratio_text(tessera_busy, ort_busy, ratio: str) -> str:
    """`ratio`, or, where _timed found the machine busy while timing either runtime, why there is none:
    the times then say more about the other work than about tessera or onnxruntime."""
    why = [f"{who}: {r}" for who, r in (("tessera", tessera_busy), ("onnxruntime", ort_busy)) if r]
    if not why:
        return ratio
    return f"none, the machine was busy while timing ({'; '.join(why)}); rerun on a quiet machine"


def _ort_latency(args, inputs, tessera_outs, output_names):
    import numpy as np

    try:
        import onnxruntime as ort
    except ImportError:
        return None
    opts = ort.SessionOptions()
    if args.threads:
        opts.intra_op_num_threads = args.threads
        opts.inter_op_num_threads = 1
    m = load_model(_model_source(args.model))
    sess = ort.InferenceSession(m.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    # tessera's input and output names are the model's own: feed and fetch by name
    feeds = {i.name: inputs[i.name] for i in sess.get_inputs() if i.name in inputs}
    missing = [i.name for i in sess.get_inputs() if i.name not in inputs]
    if missing:
        raise TesseraError(f"onnxruntime's session of {args.model} takes inputs {missing} that the compiled "
                           f"model does not (its inputs: {list(inputs)})")
    fetch = [o.name for o in sess.get_outputs()]
    if sorted(fetch) != sorted(output_names):
        raise TesseraError(f"onnxruntime's outputs {fetch} differ from the compiled model's {output_names}")
    ref = sess.run(output_names, feeds)
    for _ in range(args.warmup - 1):
        sess.run(output_names, feeds)
    times, busy = _timed(lambda: sess.run(output_names, feeds), args.repeat)
    for name, a, b in zip(output_names, tessera_outs, ref):
        if a.shape != b.shape or (a.dtype.kind == "f" and not np.allclose(a, b, rtol=1e-3, atol=1e-3)):
            print(f"warning: output {name!r} differs from onnxruntime's (max |diff| "
                  f"{float(np.max(np.abs(a.astype(np.float64) - b))) if a.shape == b.shape else 'shape'})")
    return float(np.median(times)) * 1e3, busy


# ---------------------------------------------------------------------------------------------
# tuning
# ---------------------------------------------------------------------------------------------
_DURATION = re.compile(r"^(?:(?P<h>\d+(?:\.\d*)?)h)?(?:(?P<m>\d+(?:\.\d*)?)m)?(?:(?P<s>\d+(?:\.\d*)?)s?)?$")


def parse_duration(text: str) -> float:
    """--time-budget text -> seconds: "45" or "45s", "30m", "1.5h", "1h30m", "2m30s"."""
    m = _DURATION.match(text.strip().lower())
    bare_tail = m is not None and (m["h"] or m["m"]) and m["s"] and not text.strip().lower().endswith("s")
    if not text.strip() or m is None or not any(m.groupdict().values()) or bare_tail:
        raise TesseraError(f"--time-budget {text!r}: expected a duration such as 90s, 30m, 1h or 1h30m")
    secs = sum(float(v) * k for v, k in ((m["h"], 3600), (m["m"], 60), (m["s"], 1)) if v)
    if secs <= 0:
        raise TesseraError(f"--time-budget {text!r}: must be more than 0 seconds")
    return secs


def _tune_command(args, target, resume: bool) -> str:
    """The `tessera tune` command line that repeats (resume=True: continues) this run."""
    parts = ["tessera", "tune", args.model, "--trials", str(args.trials), "--db", args.db,
             "--target", str(target)]
    for flag, value in (("--time-budget", args.time_budget), ("--pool", args.pool),
                        ("--strategy", None if args.strategy == "evolutionary" else args.strategy),
                        ("--cost-model", None if args.cost_model == "xgb" else args.cost_model),
                        ("--opt-level", None if args.opt_level == 3 else str(args.opt_level)),
                        ("--early-stopping", None if args.early_stopping == 64 else str(args.early_stopping)),
                        ("--validate-budget", args.validate_budget)):
        if value:
            parts += [flag, value]
    for flag, value in (("--pool-ca", args.pool_ca), ("--pool-cert", args.pool_cert), ("--pool-key", args.pool_key)):
        if value:
            parts += [flag, value]
    if args.pool_insecure:
        parts.append("--pool-insecure")
    for item in args.shape or ():
        parts += ["--shape", item]
    for item in args.transfer or ():
        parts += ["--transfer", item]
    if args.no_transfer:
        parts.append("--no-transfer")
    if args.no_validate:
        parts.append("--no-validate")
    if resume:
        parts.append("--resume")
    return shlex.join(parts)


def _cost_model(args, tasks, target):
    """The cost model tune_graph starts from: "random", a fresh XGBoost model (--no-transfer), or one
    pre-trained on the records of --transfer databases (default: the records shipped with tessera for
    the target's CPU level), the model's own kernels left out (they resume through --db instead)."""
    if args.cost_model != "xgb":
        return args.cost_model
    if args.no_transfer:
        return "xgb"
    model = autotune.XGBModel(seed=args.seed)
    t0 = time.perf_counter()
    got = pretrain_from(model, list(args.transfer) if args.transfer else True, target,
                        exclude={t.workload.key for t in tasks})
    where = ", ".join(args.transfer) if args.transfer else "the records shipped with tessera"
    if args.transfer and not got["used"]:
        raise TesseraError(f"--transfer: no record of {where} is for {autotune.record_target(target)} and another "
                           f"kernel than this model's ({got['skipped']} skipped); nothing to pre-train the cost "
                           f"model on")
    if got["used"]:
        print(f"cost model pre-trained on {got['used']} records of {where} ({got['skipped']} skipped) in "
              f"{time.perf_counter() - t0:.1f} s", flush=True)
    return model


def _pool_security(args):
    """The Security --pool is reached with (its --pool-* options), the address checked before the model
    is read: tls:// needs the certificates, plain tcp:// to another machine --pool-insecure."""
    tls = (args.pool_ca, args.pool_cert, args.pool_key)
    if not args.pool:
        if any(tls) or args.pool_insecure:
            raise TesseraError("--pool-ca, --pool-cert, --pool-key and --pool-insecure go with --pool")
        return None
    if any(tls) and not (args.pool_ca and args.pool_cert):
        raise TesseraError("--pool-ca and --pool-cert go together (and --pool-key unless the key is in the "
                           "certificate's file)")
    security = pool_security(tls if any(tls) else None)
    check_pool_address(args.pool, security, args.pool_insecure)    # DaskRunner warns where it is allowed
    return security


def _tune(args) -> int:
    target = _target(args)
    if args.trials < 1:
        raise TesseraError(f"--trials must be at least 1, got {args.trials}")
    budget = parse_duration(args.time_budget) if args.time_budget is not None else None
    check_budget = parse_duration(args.validate_budget) if args.validate_budget is not None else 60.0
    if args.no_validate and args.validate_budget is not None:
        raise TesseraError("--validate-budget sets the in-model check's time; it cannot go with --no-validate")
    if args.early_stopping < 0:
        raise TesseraError(f"--early-stopping must be >= 0 trials (0: never stop a task early), got "
                           f"{args.early_stopping}")
    if os.path.exists(args.db) and not args.resume:
        raise TesseraError(f"tuning database {args.db} exists; continue tuning into it with --resume "
                           f"(`{_tune_command(args, target, True)}`) or give a new --db")
    if args.resume and not os.path.isfile(args.db):
        raise TesseraError(f"--resume: tuning database {args.db} does not exist; drop --resume to start one")
    if args.png and os.path.isdir(args.png):
        raise TesseraError(f"--png {args.png} is a folder; give the path of a .png file")
    if args.cost_model != "xgb" and args.transfer:
        raise TesseraError("--transfer pre-trains the XGBoost cost model; it cannot go with --cost-model random")
    if args.no_transfer and args.transfer:
        raise TesseraError("--transfer and --no-transfer contradict each other")
    for path in args.transfer or ():
        if not os.path.isfile(path):
            raise TesseraError(f"--transfer {path}: no such tuning database")
    security = _pool_security(args)
    src = _model_source(args.model)
    graph, params = from_onnx(src, shape_dict=_parse_shapes(args.shape))
    if isinstance(graph, DeferredGraph):
        raise TesseraError(f"{args.model}: its graph depends on input values, so its kernels are not known "
                           f"before a run; fix them with --shape / a static model to tune it")
    tasks = autotune.extract_tasks(graph, params, target, args.opt_level)
    if not tasks:
        raise TesseraError(f"{args.model}: no kernel to tune for {target} (every op runs on the host or has "
                           f"symbolic shapes; fix them with --shape NAME=D0,D1,...)")
    cost_model = _cost_model(args, tasks, target)
    db = autotune.Database(args.db)
    prior = len(db.records())
    print(f"tuning {args.model}: {len(tasks)} tasks ({sum(t.weight for t in tasks)} kernel calls) for {target} "
          f"(records under {autotune.record_target(target)}), {args.trials} trials"
          + (f", time budget {format_duration(budget)}" if budget else "")
          + (f", resuming {args.db} ({prior} records)" if args.resume else f", records to {args.db}"), flush=True)
    if args.trials < len(tasks):
        print(f"note: --trials {args.trials} is fewer than the {len(tasks)} tasks: each task's default schedule is "
              f"measured first, so no latency estimate until --trials >= {len(tasks)}", flush=True)
    runner = None
    if args.pool:
        # timed as tune_graph's own runner would (the pool's devices are this machine's kind)
        runner = autotune.DaskRunner(args.pool, security=security, allow_insecure=args.pool_insecure,
                                     **graph_timing(weights_outgrow_cache(tasks, target)))
        print(f"measuring on the Dask pool at {args.pool}", flush=True)
    table = GraphTuneTable(args.trials, budget, show=not args.quiet, title=f"tessera tune {args.model}")
    try:
        with table:
            res = autotune.tune_graph(graph, params, target, max_trials=args.trials, database=db,
                                      strategy=args.strategy, cost_model=cost_model, runner=runner, seed=args.seed,
                                      time_budget=budget, early_stopping=args.early_stopping or None,
                                      opt_level=args.opt_level, tasks=tasks, progress=table, transfer=False,
                                      validate=not args.no_validate, validate_budget=check_budget)
    except KeyboardInterrupt:
        print(f"\ninterrupted; the records measured so far are in {args.db}. Continue with:\n  "
              f"{_tune_command(args, target, True)}", file=sys.stderr)
        return 130
    finally:
        if runner is not None:
            runner.close()
    print(table.text())
    if res.validation is not None:
        print(res.validation.table())
    if table.start_trials is not None and table.start_trials >= args.trials:
        print(f"{args.db} already holds {table.start_trials} trials of this model for {target}: nothing tuned; "
              f"raise --trials (a total, resumed trials included) to tune further")
    png = args.png or os.path.splitext(args.db)[0] + ".png"
    if res.history and any(e is not None for _, _, e in res.history):
        try:
            curve = tuning_curve(res, resumed=bool(table.start_trials))
            print(f"wrote {plot_tuning_curve(curve, png, f'{args.model} on {target}')} "
                  f"(estimated latency vs trials and vs seconds)")
        except TesseraError as e:
            if args.png:
                raise
            print(f"no tuning curve: {e}")
    elif args.png:
        print(f"no tuning curve written to {args.png}: no round ran in this session")
    tgt = shlex.quote(str(target))
    model, db_arg = shlex.quote(args.model), shlex.quote(args.db)
    shape = "".join(f" --shape {shlex.quote(x)}" for x in args.shape or ())
    print("compile with the records:\n"
          f"  tessera compile {model} --db {db_arg} --target {tgt}{shape}\n"
          f"  tessera bench {model} --db {db_arg} --target {tgt}{shape}\n"
          f"  tessera.compile(graph, params, target={str(target)!r}, database={args.db!r})")
    return 0


# ---------------------------------------------------------------------------------------------
# the kernel cache
# ---------------------------------------------------------------------------------------------
def _kinds_text(kinds: dict) -> str:
    return ", ".join(f"{n:,} {kind} ({kernel_cache.format_size(b)})" for kind, (n, b) in kinds.items())


def _cache(args) -> int:
    """`tessera cache info | prune | clear`: the compiled-kernel cache ($TESSERA_CACHE_DIR)."""
    root = kernel_cache.cache_dir()
    where = "$TESSERA_CACHE_DIR" if os.environ.get(kernel_cache.ENV_DIR) else "default; $TESSERA_CACHE_DIR moves it"
    if args.action == "info":
        cap = kernel_cache.max_size()
        contents = kernel_cache.scan(root)
        libs = contents.by_kind().get("libraries", (0, 0))
        missing = "" if os.path.isdir(root) else ", not created yet"
        print(f"cache:     {root} ({where}{missing})")
        print(f"libraries: {libs[0]:,} ({kernel_cache.format_size(libs[1])})")
        others = {k: v for k, v in contents.by_kind().items() if k != "libraries"}
        if others:
            print(f"also:      {_kinds_text(others)}")
        if contents.temps:
            print(f"temporary: {len(contents.temps):,} files of builds in progress or crashed "
                  f"({kernel_cache.format_size(sum(s for _, s, _ in contents.temps))})")
        pct = f" ({100 * contents.size / cap:.0f}% of the cap)" if cap else ""
        source = (f"${kernel_cache.ENV_MAX}" if os.environ.get(kernel_cache.ENV_MAX, "").strip()
                  else f"default; set ${kernel_cache.ENV_MAX}")
        print(f"total:     {kernel_cache.format_size(contents.size)}{pct}")
        print(f"cap:       {kernel_cache.format_size(cap)} ({source}); over it, a build evicts the least recently "
              f"used down to {kernel_cache.LOW_WATER:.0%}" if cap else
              f"cap:       unbounded (${kernel_cache.ENV_MAX}); `tessera cache prune --max-size SIZE` trims it")
        return 0
    if args.action == "clear":
        res = kernel_cache.clear(root)
        print(f"removed {res.count:,} entries ({kernel_cache.format_size(res.bytes)}) from {root}"
              + (f": {_kinds_text(res.removed)}" if res.removed else ""))
        return 0
    # prune
    if args.max_size is not None:
        target = kernel_cache.parse_size(args.max_size, "--max-size", unbounded_ok=False)
    else:
        cap = kernel_cache.max_size()
        if cap is None:
            raise TesseraError(f"${kernel_cache.ENV_MAX} is unbounded: give the size to prune to with --max-size "
                               f"(e.g. --max-size 2G)")
        target = cap
    res = kernel_cache.prune(target, root)
    removed = f": {_kinds_text(res.removed)}" if res.removed else ""
    temps = f"; {res.removed_temps} stale temporary files" if res.removed_temps else ""
    print(f"removed {res.count:,} entries ({kernel_cache.format_size(res.bytes)}) from {root}{removed}{temps}")
    print(f"left: {res.entries:,} entries, {kernel_cache.format_size(res.size)} (target "
          f"{kernel_cache.format_size(target)})")
    if res.kept_recent:
        print(f"kept {res.kept_recent:,} entries over the target: used in the last "
              f"{kernel_cache.MIN_AGE_S // 60} minutes (a running process may be loading them)")
    return 0


def _generate(args) -> int:
    """`tessera generate MODEL --prompt-ids 1,2,3 --max-new-tokens N`: see tessera.generation.command."""
    builtin = not os.path.isfile(args.model) and args.model in list_models()
    model = zoo.get_model(args.model, batch="batch_size") if builtin else args.model    # any batch of prompts
    return run_generate(model, args.prompt_ids, args.max_new_tokens, target=_target(args),
                        int8_weights=args.int8_weights, config=args.config, stop_tokens=args.stop_tokens,
                        label=args.model, temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
                        seed=args.seed, sample=args.sample)


def _report(args) -> int:
    """`tessera report MODEL -o report.html`: the report page of the compiled model (tessera.report)."""
    exe = _load_any(args.model, args)
    builtin = not os.path.isfile(args.model) and args.model in list_models()
    inputs = zoo.sample_input(args.model) if builtin else sample_inputs(exe, args.symbol_value)
    out = args.output or os.path.splitext(args.model)[0] + ".html"
    path = exe.report(out, database=args.db, inputs=inputs)
    print(f"wrote {path} ({os.path.getsize(path) / 1e6:.1f} MB): graph, kernels, memory plan"
          f"{', tuning' if args.db else ''} and machine of {args.model}; open it in a browser (no network needed)")
    return 0


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """Warnings as the command line's own lines (`tessera: warning: ...`), without Python's category,
    file and source line."""
    print(f"tessera: warning: {message}", file=sys.stderr if file is None else file)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="tessera", description="tessera deep learning compiler")
    parser.add_argument("--version", action="version", version=f"tessera {tessera.__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="compile, run, check and time a built-in TE program")
    demo.add_argument("--size", type=int, default=256, help="matrix size (default 256)")
    demo.add_argument("--target", default="c", help='target string (default "c")')
    _add_demo_model_option(demo)
    demo.add_argument("--vdla", action="store_true",
                      help="an int8 conv layer on the VDLA accelerator: instruction stream and simulated cycles")
    demo.set_defaults(fn=_demo)

    def model_opts(p, onnx_only=False, threads=False, db=False):
        p.add_argument("--shape", action="append", metavar="NAME=D0,D1,...",
                       help="fix an input's shape (repeatable; a dimension may be a symbol name)")
        if not onnx_only:
            p.add_argument("--target", default="c", help='target string (default "c")')
            p.add_argument("--opt-level", type=int, default=3, help="graph optimization level (default 3)")
        if threads:
            p.add_argument("--threads", type=int, default=0,
                           help="threads of the compiled model (adds -num-threads=N to the target)")
        if db:
            p.add_argument("--db", metavar="TUNE.jsonl",
                           help="tuning records (from `tessera tune`) to compile the kernels with")

    comp = sub.add_parser("compile", help="compile an ONNX model to a deployable library (+ its C header)")
    comp.add_argument("model", help="the .onnx model")
    comp.add_argument("-o", "--output", help="library path (default: the model's name with .so)")
    model_opts(comp, threads=True, db=True)
    comp.set_defaults(fn=_compile)

    run = sub.add_parser("run", help="run a compiled library or an ONNX model on .npy inputs")
    run.add_argument("model", help="a library from `tessera compile`, or an .onnx model")
    run.add_argument("--input", action="append", metavar="[NAME=]FILE.npy",
                     help="an input (repeatable): by position in the model's input order, or NAME=file with "
                          "the model's own input name (it may hold '/', ':' or '='; the longest input name "
                          "before an '=' wins)")
    run.add_argument("--output", action="append", metavar="FILE",
                     help="save the outputs (.npy per output, or one .npz for all)")
    model_opts(run, threads=True, db=True)
    run.set_defaults(fn=_run)

    check = sub.add_parser("check", help="list every op of an ONNX model tessera cannot convert")
    check.add_argument("model", help="the .onnx model")
    model_opts(check, onnx_only=True)
    check.set_defaults(fn=_check)

    show = sub.add_parser("show", help="print a model's graph as tessera optimizes it (fused functions, layouts)")
    show.add_argument("model", help="an .onnx model, a .pt2 program, a built-in model name or a compiled library")
    model_opts(show)
    show.set_defaults(fn=_show)

    bench = sub.add_parser("bench", help="latency of a model through tessera beside ONNX Runtime")
    bench.add_argument("model", help="an .onnx model (or a library from `tessera compile`)")
    bench.add_argument("--threads", type=int, default=0, help="threads for both runtimes (default: all)")
    bench.add_argument("--repeat", type=int, default=20, help="timed runs (default 20)")
    bench.add_argument("--warmup", type=int, default=3, help="untimed runs first (default 3)")
    bench.add_argument("--number", type=int, default=5, help="calls per C-timer measurement (default 5)")
    bench.add_argument("--symbol-value", type=int, default=1,
                       help="value of symbolic dimensions in the random inputs (default 1)")
    bench.add_argument("--profile", action="store_true", help="also print the per-node table")
    model_opts(bench, db=True)
    bench.set_defaults(fn=_bench)

    tune = sub.add_parser("tune", help="tune every kernel of a model into a database of records",
                          description="Tune the kernels of a model (Ansor's task scheduler over its deduplicated "
                                      "kernels; a live table of tasks); the records go to --db as they are "
                                      "measured, and compile|run|bench --db use them.")
    tune.add_argument("model", help="an .onnx model, or a built-in model name (" + ", ".join(list_models()) + ")")
    tune.add_argument("--trials", type=int, required=True,
                      help="measured candidates in all, over every task (with --resume: the database's trials "
                           "of the model count)")
    tune.add_argument("--db", required=True, metavar="TUNE.jsonl", help="the tuning database (JSON lines)")
    tune.add_argument("--resume", action="store_true", help="continue tuning into an existing --db")
    tune.add_argument("--threads", type=int, default=0,
                      help="threads the kernels are tuned for (adds -num-threads=N to the target)")
    tune.add_argument("--time-budget", metavar="DURATION", help="stop after this long: 90s, 30m, 1h30m")
    tune.add_argument("--pool", metavar="tls://HOST:8786",
                      help="measure on the Dask workers of this scheduler that announce the target "
                           "(python -m tessera.autotune.measure.dask_worker tls://HOST:8786 --target T --tls-...)")
    tune.add_argument("--pool-ca", metavar="CA.pem", help="the CA certificate that signed the pool's certificates "
                                                          "(tls:// pools; default: Dask's configuration)")
    tune.add_argument("--pool-cert", metavar="CERT.pem", help="this client's certificate for the pool (PEM; may hold "
                                                              "its key too)")
    tune.add_argument("--pool-key", metavar="KEY.pem", help="this client's private key for the pool (PEM)")
    tune.add_argument("--pool-insecure", action="store_true",
                      help="allow a plain tcp:// pool on another machine: anyone who can reach its scheduler runs "
                           "arbitrary code as the workers' user (Dask ships pickled functions)")
    tune.add_argument("--strategy", default="evolutionary", choices=["evolutionary", "annealing", "random"],
                      help="search strategy (default evolutionary)")
    tune.add_argument("--cost-model", default="xgb", choices=["xgb", "random"], help="cost model (default xgb)")
    tune.add_argument("--transfer", metavar="OTHER.jsonl", action="append",
                      help="pre-train the cost model on another tuning database's records (repeatable; default: "
                           "the records shipped with tessera for the target's CPU level)")
    tune.add_argument("--no-transfer", action="store_true",
                      help="start the cost model from nothing (no pre-training on other records)")
    tune.add_argument("--early-stopping", type=int, default=64, metavar="N",
                      help="a task stops after N trials without improvement (default 64; 0: never)")
    tune.add_argument("--no-validate", action="store_true",
                      help="skip the in-model check (after the search, the whole model is compiled with each heavy "
                           "kernel's default and top candidates and timed; a candidate is kept only where it is "
                           "faster there)")
    tune.add_argument("--validate-budget", metavar="DURATION",
                      help="time for the in-model check (default 60s; it runs after --time-budget)")
    tune.add_argument("--png", metavar="CURVE.png",
                      help="where to draw the estimated latency vs trials and seconds (default: --db's name "
                           "with .png)")
    tune.add_argument("--seed", type=int, default=None, help="random seed of the search")
    tune.add_argument("--quiet", action="store_true", help="no live table or progress lines")
    model_opts(tune)
    tune.set_defaults(fn=_tune)

    report = sub.add_parser("report", help="one HTML page: the optimized graph coloured by measured time, each "
                                           "kernel's code, the memory plan, the tuning (with --db), the machine")
    report.add_argument("model", help="an .onnx model, a .pt2 program or a built-in model name")
    report.add_argument("-o", "--output", help="the page's path (default: the model's name with .html)")
    report.add_argument("--symbol-value", type=int, default=1,
                        help="value of symbolic dimensions in the random inputs profiled (default 1)")
    model_opts(report, threads=True, db=True)
    report.set_defaults(fn=_report)

    quant = sub.add_parser("quantize", help="post-training int8 quantization of a model into a QDQ ONNX model",
                           description="Quantize an fp32 model to int8 (tessera.quantize: batch norm folded, uint8 "
                                       "activations calibrated on the --calib inputs, int8 weights) and write it "
                                       "as a QDQ ONNX model (QuantizeLinear / DequantizeLinear around the float "
                                       "ops, int8 weights), which ONNX Runtime and tessera read.")
    quant.add_argument("model", help="an .onnx model or a built-in model name (" + ", ".join(list_models()) + ")")
    quant.add_argument("--calib", required=True, metavar="DIR", help=CALIB_HELP)
    quant.add_argument("-o", "--output", help="the int8 model's path (default: the model's name with _int8.onnx)")
    quant.add_argument("--method", default="minmax", choices=["minmax", "percentile", "entropy"],
                       help="how an activation's range is chosen from the calibration values (default minmax)")
    quant.add_argument("--percentile", type=float, default=None, metavar="P",
                       help="with --method percentile: the percentile of |values| kept (default 99.99)")
    quant.add_argument("--no-per-channel", action="store_true",
                       help="one scale per weight tensor (default: one per output channel)")
    quant.add_argument("--skip", action="extend", nargs="+", metavar="NAME",
                       help="nodes or ops (of the graph after batch-norm folding) left in float, e.g. --skip fc "
                            "nn.global_avg_pool")
    quant.add_argument("--opset", type=int, default=DEFAULT_OPSET,
                       help=f"the ONNX opset written (default {DEFAULT_OPSET}; 13 or newer)")
    model_opts(quant, onnx_only=True)
    quant.set_defaults(fn=_quantize)

    cache = sub.add_parser("cache", help="the compiled-kernel cache: its size and cap, prune or clear it",
                           description="The compiled-kernel cache ($TESSERA_CACHE_DIR, default ~/.cache/tessera): "
                                       "libraries by content hash, model weight blobs, tuning reference outputs. "
                                       f"${kernel_cache.ENV_MAX} caps it (default 10G; 0 or none: unbounded): "
                                       "over it, a build evicts the least recently used.")
    actions = cache.add_subparsers(dest="action", required=True)
    actions.add_parser("info", help="where it is, how many libraries, its size and its cap")
    prune = actions.add_parser("prune", help="evict the least recently used entries down to a size now")
    prune.add_argument("--max-size", metavar="SIZE",
                       help=f"the size to prune to: bytes or 500M, 2G (powers of 1024); default: the cap "
                            f"(${kernel_cache.ENV_MAX}). Entries used in the last "
                            f"{kernel_cache.MIN_AGE_S // 60} minutes stay")
    actions.add_parser("clear", help="remove every entry (asks nothing)")
    cache.set_defaults(fn=_cache)

    gen = sub.add_parser("generate", help="generate tokens with a decoder language model over a KV cache",
                         description="Continue a prompt (token ids) with a decoder language model (the ONNX form "
                                     "transformers' and optimum's exporters write, GPT-2 or LLaMA-style): the "
                                     "prompt through the compiled model, then one compiled decoding step a token; "
                                     "prints the new tokens and tokens/s.")
    gen.add_argument("model", help="a decoder .onnx model (or a built-in one: gpt2_decoder, llama_decoder)")
    gen.add_argument("--prompt-ids", action="append", required=True, metavar="1,2,3",
                     help="the prompt's token ids (repeat for a batch of prompts)")
    gen.add_argument("--max-new-tokens", type=int, default=32, help="tokens to generate (default 32)")
    gen.add_argument("--int8-weights", action="store_true",
                     help="the decoding step's matrices as int8 with per-row scales (a quarter of the bytes)")
    gen.add_argument("--sample", action="store_true", help="sample (default: greedy unless --temperature, "
                                                           "--top-k or --top-p is given)")
    gen.add_argument("--temperature", type=float, default=1.0, help="sampling temperature (default 1)")
    gen.add_argument("--top-k", type=int, default=0, help="sample among the k most likely tokens (0: all)")
    gen.add_argument("--top-p", type=float, default=1.0, help="sample within this probability mass (default 1)")
    gen.add_argument("--seed", type=int, default=None, help="random seed of the sampling")
    gen.add_argument("--stop-tokens", metavar="ID,ID", help="token ids that end a row (kept)")
    gen.add_argument("--config", metavar="config.json",
                     help="the transformers configuration when the model does not carry it (default: config.json "
                          "beside the model)")
    gen.add_argument("--target", default="c", help='a CPU target string (default "c")')
    gen.add_argument("--threads", type=int, default=0,
                     help="threads (adds -num-threads=N to the target; default: all)")
    gen.set_defaults(fn=_generate)

    for p in (demo, comp, run, show, bench, quant):
        _add_quiet_option(p)
    for p in (comp, run, show, bench):
        _add_disable_pass_option(p)
    args = parser.parse_args(argv)
    # what a long compile is doing, on stderr once it has taken 2 s (tune draws its own table)
    show_progress = not getattr(args, "quiet", False) and args.command != "tune"
    try:
        with warnings.catch_warnings(), progress.Reporter(show=show_progress):
            warnings.showwarning = _show_warning
            return args.fn(args)
    except KeyboardInterrupt:
        print("tessera: interrupted", file=sys.stderr)
        return 130
    except TesseraError as e:
        print(f"tessera: error: {e}", file=sys.stderr)
        return 2
    except (OSError, ImportError, MemoryError) as e:
        print(f"tessera: error: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # noqa: BLE001 - no tracebacks for users; TESSERA_TRACEBACK=1 shows them
        if os.environ.get("TESSERA_TRACEBACK"):
            raise
        print(f"tessera: error: internal error ({type(e).__name__}: {e}); rerun with TESSERA_TRACEBACK=1 "
              f"for the traceback and report it", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
