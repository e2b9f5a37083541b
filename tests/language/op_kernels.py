"""Kernels exercising each op of the tile language (a constexpr OP picks the op when the kernel is
traced), for tests/language/test_ops.py."""
import tessera
import tessera.language as tl


@tessera.jit
def _maximum(a, b):
    return tl.maximum(a, b)


def _argmax_combine(a, b):
    va, ia = a
    vb, ib = b
    take = (vb > va) | ((vb == va) & (ib < ia))
    return tl.where(take, vb, va), tl.where(take, ib, ia)


UNARY_OPS = ("exp", "exp2", "log", "log2", "sqrt", "rsqrt", "sigmoid", "erf", "abs", "neg", "sin", "cos", "tanh",
             "floor", "ceil")


@tessera.jit
def unary(X, Y, n, BLOCK: tl.constexpr):
    """Row k of Y (n wide) = UNARY_OPS[k] of X."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(X + offs, mask=mask, other=1.0)
    ys = (tl.exp(x), tl.exp2(x), tl.log(x), tl.log2(x), tl.sqrt(x), tl.rsqrt(x), tl.sigmoid(x), tl.erf(x),
          tl.abs(x - 1.5), -x, tl.sin(x), tl.cos(x), tl.tanh(x), tl.floor(x * 3.0), tl.ceil(x * 3.0))
    for k in tl.static_range(len(ys)):
        tl.store(Y + k * n + offs, ys[k], mask=mask)


FLOAT_OPS = ("add", "sub", "mul", "truediv", "floordiv", "mod", "maximum", "minimum", "where", "fma", "clamp", "lt")
INT_OPS = ("add", "sub", "mul", "floordiv", "mod", "maximum", "minimum", "where", "lt", "and", "or", "xor", "shl",
           "shr")


@tessera.jit
def binary(X, Y, Z, n, INTS: tl.constexpr, BLOCK: tl.constexpr):
    """Row k of Z (n wide) = FLOAT_OPS[k] (INT_OPS[k] with INTS) of X and Y."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(X + offs, mask=mask, other=1)
    y = tl.load(Y + offs, mask=mask, other=1)
    zs = (x + y, x - y, x * y)
    if not INTS:
        zs += (x / y,)
    zs += (x // y, x % y, tl.maximum(x, y), tl.minimum(x, y), tl.where(x > y, x, y * 2))
    if INTS:
        zs += ((x < y).to(tl.int32) + 2 * (x == y).to(tl.int32), x & y, x | y, x ^ y, x << (y & 7), x >> (y & 7))
    else:
        zs += (tl.fma(x, y, x), tl.clamp(x, y, y + 1), (x < y).to(tl.float32) + 2 * (x == y).to(tl.float32))
    for k in tl.static_range(len(zs)):
        tl.store(Z + k * n + offs, zs[k], mask=mask)


@tessera.jit
def cast(X, Y, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(Y + offs, tl.load(X + offs, mask=mask), mask=mask)   # the store converts to Y's type


@tessera.jit
def reduce2d(X, Y, M, N, stride, OP: tl.constexpr, AXIS: tl.constexpr, KEEP: tl.constexpr,
             BM: tl.constexpr, BN: tl.constexpr):
    rm = tl.arange(0, BM)
    rn = tl.arange(0, BN)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    if OP == "sum":
        other = 0.0
    elif OP == "max" or OP == "argmax" or OP == "reduce_max" or OP == "reduce_argmax":
        other = -float("inf")
    else:
        other = float("inf")
    x = tl.load(X + rm[:, None] * stride + rn[None, :], mask=mask, other=other)
    if OP == "sum":
        r = tl.sum(x, axis=AXIS, keep_dims=KEEP)
    elif OP == "max":
        r = tl.max(x, axis=AXIS, keep_dims=KEEP)
    elif OP == "min":
        r = tl.min(x, axis=AXIS, keep_dims=KEEP)
    elif OP == "argmax":
        r = tl.argmax(x, axis=AXIS, keep_dims=KEEP)
    elif OP == "argmin":
        r = tl.argmin(x, axis=AXIS, keep_dims=KEEP)
    elif OP == "reduce_max":
        r = tl.reduce(x, AXIS, _maximum, keep_dims=KEEP)
    elif OP == "reduce_argmax":
        idx = tl.broadcast_to(rn[None, :], (BM, BN)) if AXIS == 1 else tl.broadcast_to(rm[:, None], (BM, BN))
        _, r = tl.reduce((x, idx), AXIS, _argmax_combine, keep_dims=KEEP)
    else:
        tl.static_assert(False, "unknown OP")
    if AXIS == 1:
        if KEEP:
            tl.store(Y + rm[:, None] + tl.zeros((BM, 1), tl.int32), r, mask=rm[:, None] < M)
        else:
            tl.store(Y + rm, r, mask=rm < M)
    else:
        if KEEP:
            tl.store(Y + rn[None, :], r, mask=rn[None, :] < N)
        else:
            tl.store(Y + rn, r, mask=rn < N)


@tessera.jit
def shapes(X, Y, M, N, OP: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
    rm = tl.arange(0, BM)
    rn = tl.arange(0, BN)
    if OP == "trans":   # Y (N x M) = X (M x N) transposed
        x = tl.load(X + rm[:, None] * N + rn[None, :], mask=(rm[:, None] < M) & (rn[None, :] < N))
        t = tl.trans(x)
        tl.store(Y + rn[:, None] * M + rm[None, :], t, mask=(rn[:, None] < N) & (rm[None, :] < M))
    elif OP == "reshape":   # Y[i] = sum of row i of X viewed as (BM, BN); X holds BM * BN values
        flat = tl.load(X + tl.arange(0, BM * BN))
        r = tl.sum(tl.reshape(flat, (BM, BN)), axis=1)
        tl.store(Y + rm, r)
    elif OP == "expand_broadcast":   # Y (M x N) = X[:M] as a column + 10 * X[:N] as a row
        col = tl.load(X + rm, mask=rm < M, other=0.0)
        row = tl.load(X + rn, mask=rn < N, other=0.0)
        y = tl.expand_dims(col, 1) + 10.0 * tl.broadcast_to(row[None, :], (BM, BN))
        tl.store(Y + rm[:, None] * N + rn[None, :], y, mask=(rm[:, None] < M) & (rn[None, :] < N))
    elif OP == "colmajor":   # Y (M x N) = X stored column-major (X[j * M + i] is element (i, j))
        x = tl.load(X + rm[:, None] + rn[None, :] * M, mask=(rm[:, None] < M) & (rn[None, :] < N))
        tl.store(Y + rm[:, None] * N + rn[None, :], x, mask=(rm[:, None] < M) & (rn[None, :] < N))
    elif OP == "full":
        y = tl.full((BM, BN), 3.5, tl.float32) + tl.zeros((BM, BN), tl.float32)
        for i in tl.static_range(3):
            y += i
        tl.store(Y + rm[:, None] * N + rn[None, :], y, mask=(rm[:, None] < M) & (rn[None, :] < N))
    else:
        tl.static_assert(False, "unknown OP")


@tessera.jit
def programs(Y):
    """Y[pid] = pid_x + 10 pid_y + 100 pid_z + 1000 (grid_x + 10 grid_y + 100 grid_z)."""
    px, py, pz = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    nx, ny, nz = tl.num_programs(0), tl.num_programs(1), tl.num_programs(2)
    i = px + nx * (py + ny * pz)
    i = tl.multiple_of(i, 1)
    tl.store(Y + i, px + 10 * py + 100 * pz + 1000 * (nx + 10 * ny + 100 * nz))


@tessera.jit
def dot(A, B, C, M, N, K, TRANS_B: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """C = A @ B (B given transposed, N x K, when TRANS_B), one program, the K loop carried."""
    rm = tl.arange(0, BM)
    rn = tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=C.dtype.element_ty)
    for k0 in range(0, K, BK):
        a = tl.load(A + rm[:, None] * K + (k0 + rk)[None, :], mask=(rm[:, None] < M) & ((k0 + rk)[None, :] < K),
                    other=0)
        if TRANS_B:
            bt = tl.load(B + rn[:, None] * K + (k0 + rk)[None, :],
                         mask=(rn[:, None] < N) & ((k0 + rk)[None, :] < K), other=0)
            acc = tl.dot(a, tl.trans(bt), acc)
        else:
            b = tl.load(B + (k0 + rk)[:, None] * N + rn[None, :],
                        mask=((k0 + rk)[:, None] < K) & (rn[None, :] < N), other=0)
            acc += tl.dot(a, b)
    tl.store(C + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


@tessera.jit
def atomics(X, H, n, BLOCK: tl.constexpr):
    """H[X[i]] += 1 for every i, and H[-1] += the sum of X (the last bin)."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    b = tl.load(X + offs, mask=m, other=0)
    tl.atomic_add(H + b, 1, mask=m)
    tl.atomic_add(H + 15, tl.sum(tl.where(m, b, 0), axis=0))


@tessera.jit
def walk(X, Y, n, BLOCK: tl.constexpr):
    """Y = the sum of X's first n blocks + block n (read through the pointer the loop advanced) + 2n,
    times 2^n: a pointer and an int carried in closed form, a float carried as is."""
    p = X + tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK,), tl.float32)
    cnt = 0
    scale = 1.0
    for i in range(0, n):
        acc += tl.load(p)
        p += BLOCK
        cnt += 2
        scale = scale * 2.0
    tl.store(Y + tl.arange(0, BLOCK), (acc + tl.load(p) + cnt) * scale)
