#!/usr/bin/env python3
"""Golden data for the fp64 CPU references: tests/data/*.npy and tests/data/manifest.txt.

    python3 reference/make_reference.py            # (re)write tests/data
    python3 reference/make_reference.py --check    # verify the committed files (a CTest)
    python3 reference/make_reference.py --out DIR  # use DIR instead of tests/data

The math is NumPy float64. Inputs come from np.random.RandomState(seed), one seed per case (its
stream is stable across NumPy versions), are rounded to float32 (what the GPU steps consume) and
stored as <f4; the math upcasts those float32 values to float64. Outputs are stored as <f8.
tests/test_reference.cpp runs the C++ references on every case of the manifest and compares
them with these outputs, so CI (no GPU) tests real numerics.

Conventions (docs/conventions.md, "Layout"; the same as reference/reference.h):
  softmax    y = exp(x - max) / sum per row; an all -inf row gives zeros (it attends to
             nothing); a NaN or +inf anywhere in a row makes the whole row NaN.
  matmul     nt: C = alpha·A·Bᵀ with B [N, K];  nn: C = alpha·A·B with B [K, N].
  attention  [batch, heads, seq, head_dim]; S = Q·Kᵀ·scale; causal masks key j > query i
             (top-left aligned); P = softmax(S); O = P·V; LSE = log(sum_j exp(S_ij)).
             Backward for dO: dV = Pᵀ·dO, dP = dO·Vᵀ, delta = rowsum(dO∘O),
             dS = P∘(dP - delta), dQ = dS·K·scale, dK = dSᵀ·Q·scale.
  attention_gqa    K, V with fewer heads (grouped-query attention): query head h reads K/V head
             h // (heads / kv_heads); dK, dV of a K/V head are the sums over its query heads.
  attention_cache  a KV cache: sequence b has keys [0, lens[b]) of the capacity seq_k, and causal
             aligns its last query with its last key; the forward only. These two are checked
             against the harness's references (tests/test_harness.cpp).
"""
import argparse
import difflib
import math
import sys
from pathlib import Path

try:
    import numpy as np
except ImportError:
    sys.exit(f"make_reference.py needs NumPy, which {sys.executable} does not have "
             "(try /usr/bin/python3, or pip install numpy)")

DATA_DIR = Path(__file__).resolve().parent.parent / "tests" / "data"

# --check: inputs must match exactly; an output element passes if
#   |committed - regenerated| <= ATOL * max(1, max|regenerated tensor|) + RTOL * |regenerated|.
# The float64 math is deterministic, but summation order (BLAS blocking, SIMD width) and np.exp
# differ by ulps between NumPy builds. Those ulps are amplified where the math is ill-conditioned:
# in the x8 attention cases S spans hundreds, so an ulp of S is ~1e-13 relative in P, and elements
# of dQ/dK that cancel to ~0 keep the absolute error of terms ~100: two valid float64 orders
# (BLAS matmul vs einsum) differ there by up to 5e-12. Hence an ATOL relative to the tensor's scale
# and margin; any real change (seed, shape, formula) moves outputs by far more. The C++ test
# (tests/test_reference.cpp) uses the same rule.
RTOL, ATOL = 1e-10, 1e-12


# ---- the math ---------------------------------------------------------------------------------
def softmax(x):
    """Softmax over the last axis and its log-sum-exp (natural log), project conventions."""
    with np.errstate(invalid="ignore", divide="ignore"):
        m = x.max(axis=-1, keepdims=True)  # NaN if the row has a NaN, +inf if it has a +inf
        dead = np.isneginf(m)  # every entry -inf: the row attends to nothing
        m = np.where(dead, 0.0, m)  # so that x - m = -inf, not NaN, in dead rows
        e = np.exp(x - m)  # +inf - +inf = NaN: a +inf row becomes NaN
        l = e.sum(axis=-1, keepdims=True)
        y = e / np.where(dead, 1.0, l)  # dead rows: 0 / 1 = 0
        lse = m + np.log(l)  # dead rows: 0 + log(0) = -inf
    return y, lse[..., 0]


def matmul(a, b, alpha, layout):
    return alpha * (a @ (b.T if layout == "nt" else b))


def attention(q, k, v, dout, scale, causal, lens=None):
    """Forward and backward. q, dout: [B, H, Sq, D]; k, v: [B, KVH, Sk, D], H a multiple of KVH: query head
    h reads K/V head h // (H // KVH) (grouped-query attention; KVH = H is MHA), and dK, dV of a K/V head
    sum over its query heads. lens (a KV cache): sequence b has keys [0, lens[b]) and causal aligns its
    last query with its last key (query i sees keys j <= lens[b] - Sq + i); forward only."""
    t = lambda x: np.swapaxes(x, -1, -2)
    b_, h_, kvh = q.shape[0], q.shape[1], k.shape[1]
    g = h_ // kvh
    ke, ve = np.repeat(k, g, axis=1), np.repeat(v, g, axis=1)  # each K/V head once per query head of its group
    s = scale * (q @ t(ke))  # [B, H, Sq, Sk]
    sq, sk = s.shape[-2:]
    i, j = np.arange(sq)[:, None], np.arange(sk)[None, :]
    if lens is not None:
        for b, n in enumerate(lens):
            s[b] = np.where((j >= n) | (causal & (j > i + n - sq)), -np.inf, s[b])
    elif causal:
        s = np.where(j > i, -np.inf, s)
    p, lse = softmax(s)
    o = p @ ve
    if lens is not None:
        return dict(o=o, lse=lse)
    dv = t(p) @ dout
    dp = dout @ t(ve)
    delta = (dout * o).sum(axis=-1, keepdims=True)
    ds = p * (dp - delta)
    dk = scale * (t(ds) @ q)
    group_sum = lambda x: x.reshape(b_, kvh, g, *x.shape[2:]).sum(axis=2)  # noqa: E731
    return dict(o=o, lse=lse, dq=scale * (ds @ ke), dk=group_sum(dk), dv=group_sum(dv))


# ---- the cases ----------------------------------------------------------------------------------
class Case:
    def __init__(self, op, name, params, inputs, outputs):
        assert name.replace("_", "").isalnum(), name  # also a GoogleTest parameter name
        self.op, self.name, self.params = op, name, params
        self.inputs = {t: a.astype(np.float32) for t, a in inputs.items()}
        self.outputs = {t: np.asarray(a, np.float64) for t, a in outputs.items()}

    def manifest_line(self):
        return " ".join([self.op, self.name] + [f"{k}={v}" for k, v in self.params.items()])

    def files(self):
        """{file name: (array, is_input)}"""
        out = {f"{self.name}.{t}.npy": (a, True) for t, a in self.inputs.items()}
        out.update({f"{self.name}.{t}.npy": (a, False) for t, a in self.outputs.items()})
        return out


def softmax_case(name, seed, rows, cols, special_rows=None):
    """Random rows (N(0, 3²)); special_rows(rs, cols) may replace the first few."""
    rs = np.random.RandomState(seed)
    x = (3.0 * rs.standard_normal((rows, cols))).astype(np.float32)
    for r, row in enumerate(special_rows(rs, cols) if special_rows else []):
        x[r] = row
    y, _ = softmax(x.astype(np.float64))
    return Case("softmax", name, dict(rows=rows, cols=cols), dict(x=x), dict(y=y))


def huge_rows(rs, n):
    """Magnitudes where exp(x) overflows unless the max is subtracted first."""
    one_big = 3.0 * rs.standard_normal(n)
    one_big[n // 2] = 1e30
    return [rs.uniform(-1, 1, n) * 1e30, rs.uniform(-1, 1, n) * 3e38, np.full(n, 1e30),
            np.full(n, -3e38), one_big, np.where(np.arange(n) % 2 == 0, 3e38, -3e38)]


def neginf_rows(rs, n):
    """-inf entries (masked keys) and a row that is all -inf (attends to nothing -> zeros)."""
    i = np.arange(n)
    return [np.where(i % 3 == 0, -np.inf, rs.standard_normal(n)),
            np.where(i == 7, 2.0, -np.inf),
            np.full(n, -np.inf),
            np.where((i == 0) | (i == n - 1), -np.inf, rs.standard_normal(n)),
            np.where(i % 2 == 0, -np.inf, rs.uniform(-1, 1, n) * 1e30)]


def nonfinite_rows(rs, n):
    """NaN or +inf anywhere makes the whole row NaN; the other rows are unaffected."""
    i = np.arange(n)
    return [np.where(i == 5, np.nan, rs.standard_normal(n)),
            np.where(i == 9, np.inf, rs.standard_normal(n)),
            np.where(i == 0, np.inf, np.where(i == 1, -np.inf, rs.standard_normal(n)))]


def matmul_case(seed, M, N, K, alpha, layout):
    rs = np.random.RandomState(seed)
    a = rs.standard_normal((M, K)).astype(np.float32)
    b = rs.standard_normal((N, K) if layout == "nt" else (K, N)).astype(np.float32)
    c = matmul(a.astype(np.float64), b.astype(np.float64), alpha, layout)
    return Case("matmul", f"mm_{layout}_{M}x{N}x{K}", dict(M=M, N=N, K=K, alpha=alpha, layout=layout),
                dict(a=a, b=b), dict(c=c))


def attention_case(seed, batch, heads, seq_q, seq_k, head_dim, causal, magnitude=1.0, scale=None):
    rs = np.random.RandomState(seed)
    scale = 1.0 / math.sqrt(head_dim) if scale is None else scale
    qshape, kshape = (batch, heads, seq_q, head_dim), (batch, heads, seq_k, head_dim)
    # docs/conventions.md, "Correctness": offset by +0.5 so that outputs are not near zero.
    q, k, v = (magnitude * (rs.standard_normal(s) + 0.5) for s in (qshape, kshape, kshape))
    dout = rs.standard_normal(qshape)
    inputs = {t: a.astype(np.float32) for t, a in dict(q=q, k=k, v=v, dout=dout).items()}
    outputs = attention(*(inputs[t].astype(np.float64) for t in ("q", "k", "v", "dout")), scale, causal)
    name = f"at_{'causal_' if causal else ''}q{seq_q}_k{seq_k}_d{head_dim}"
    name += f"_b{batch}h{heads}" if batch * heads > 1 else ""
    name += f"_x{magnitude:g}" if magnitude != 1.0 else ""
    name += "_scale" if scale != 1.0 / math.sqrt(head_dim) else ""
    params = dict(batch=batch, heads=heads, seq_q=seq_q, seq_k=seq_k, head_dim=head_dim,
                  causal=int(causal), scale=repr(scale))
    return Case("attention", name, params, inputs, outputs)


def grouped_case(seed, batch, heads, kv_heads, seq_q, seq_k, head_dim, causal, lens=None):
    """Grouped-query attention (op attention_gqa: forward and backward), or with `lens` a KV cache of that
    capacity (op attention_cache: the forward; lens in the manifest as 5,0,7). The harness's references
    (harness/attention_reference.h) are checked against these by tests/test_harness.cpp."""
    rs = np.random.RandomState(seed)
    scale = float(np.float32(1.0 / math.sqrt(head_dim)))  # as fa::AttnParams holds it: a float
    qshape, kshape = (batch, heads, seq_q, head_dim), (batch, kv_heads, seq_k, head_dim)
    q, k, v = (rs.standard_normal(s) + 0.5 for s in (qshape, kshape, kshape))
    inputs = dict(q=q, k=k, v=v) if lens else dict(q=q, k=k, v=v, dout=rs.standard_normal(qshape))
    inputs = {t: a.astype(np.float32) for t, a in inputs.items()}
    dout = inputs["dout"].astype(np.float64) if "dout" in inputs else np.zeros(qshape)
    outputs = attention(*(inputs[t].astype(np.float64) for t in ("q", "k", "v")), dout, scale, causal, lens)
    op = "attention_cache" if lens else "attention_gqa"
    name = f"{'ac' if lens else 'ag'}_{'causal_' if causal else ''}q{seq_q}_k{seq_k}_d{head_dim}_b{batch}h{heads}kv{kv_heads}"
    params = dict(batch=batch, heads=heads, kv_heads=kv_heads, seq_q=seq_q, seq_k=seq_k, head_dim=head_dim,
                  causal=int(causal), scale=repr(scale))
    if lens:
        params["lens"] = ",".join(str(n) for n in lens)
    return Case(op, name, params, inputs, outputs)


def all_cases():
    # Row lengths around the warp size (32) and the float4 width (4), and long ones.
    cases = [softmax_case(f"sm_cols_{cols}", seed, rows, cols)
             for seed, rows, cols in [(101, 4, 1), (102, 6, 31), (103, 6, 32), (104, 6, 33),
                                      (105, 3, 1000), (106, 3, 1025), (107, 3, 4097)]]
    cases += [softmax_case("sm_rows_64", 108, 64, 100),
              softmax_case("sm_huge", 109, 8, 67, huge_rows),
              softmax_case("sm_neginf", 110, 6, 40, neginf_rows),
              softmax_case("sm_nonfinite", 111, 4, 33, nonfinite_rows)]
    cases += [matmul_case(200 + i, *shape, alpha, layout)
              for i, (shape, alpha, layout) in enumerate([
                  ((1, 1, 1), 1.0, "nt"), ((1, 1, 1), 1.0, "nn"),
                  ((17, 23, 31), 0.5, "nt"), ((17, 23, 31), 1.0, "nn"),
                  ((33, 65, 127), 1.0, "nt"), ((33, 65, 127), -1.25, "nn"),
                  ((64, 48, 40), 0.125, "nt"), ((64, 48, 40), 1.0, "nn")])]
    # (seed, batch, heads, seq_q, seq_k, head_dim, causal[, magnitude[, scale]])
    cases += [attention_case(*args) for args in [
        (300, 1, 1, 1, 1, 64, False),
        (301, 1, 1, 1, 17, 64, True),  # one query: sees key 0 only
        (302, 1, 2, 17, 17, 64, False),
        (303, 2, 1, 17, 17, 64, True),
        (304, 1, 2, 33, 70, 64, False),
        (305, 1, 2, 33, 70, 64, True),
        (306, 1, 2, 70, 33, 64, True),  # seq_q > seq_k: queries 33.. see every key
        (307, 1, 1, 70, 33, 128, False),
        (308, 1, 1, 17, 100, 128, True),
        (309, 2, 2, 100, 100, 64, True),
        (310, 1, 2, 100, 100, 128, False),
        (311, 1, 2, 65, 65, 128, True, 8.0),  # large magnitudes: S spans hundreds
        (312, 1, 1, 65, 40, 64, False, 8.0),
        (313, 1, 1, 33, 33, 64, True, 1.0, 0.3),  # a scale other than 1/sqrt(head_dim)
    ]]
    # (seed, batch, heads, kv_heads, seq_q, seq_k, head_dim, causal[, lens])
    cases += [grouped_case(*args) for args in [
        (400, 2, 4, 2, 17, 33, 64, False),  # GQA, groups of 2
        (401, 1, 6, 1, 33, 17, 64, True),   # MQA, seq_q > seq_k
        (402, 2, 6, 3, 20, 40, 128, True),
        (410, 3, 4, 2, 1, 70, 64, False, (70, 0, 9)),   # a KV cache: full, empty, short
        (411, 2, 8, 2, 3, 50, 64, True, (50, 3)),       # causal at each sequence's end
        (412, 2, 4, 4, 2, 33, 128, True, (17, 33)),     # MHA with a cache
    ]]
    names = [c.name for c in cases]
    assert len(names) == len(set(names)), "case names must be unique"
    return cases


def manifest_text(cases):
    return ("# Golden cases for tests/test_reference.cpp, written by reference/make_reference.py.\n"
            "# One case per line: <op> <case> <param>=<value>...; its tensors are <case>.<tensor>.npy,\n"
            "# inputs <f4 and outputs <f8.\n" + "".join(c.manifest_line() + "\n" for c in cases))


# ---- write and check ----------------------------------------------------------------------------
def write(out, cases):
    out.mkdir(parents=True, exist_ok=True)
    files = {f: a for c in cases for f, (a, _) in c.files().items()}
    for stale in sorted(set(p.name for p in out.glob("*.npy")) - set(files)):
        print(f"removing stale {out / stale}")
        (out / stale).unlink()
    for f, a in files.items():
        np.save(out / f, a)
    (out / "manifest.txt").write_text(manifest_text(cases))
    print(f"wrote {len(files)} files and manifest.txt ({len(cases)} cases) to {out}")


def compare(path, want, exact):
    """None if the file at path holds want (exactly, or within tolerance), else the problem."""
    try:
        got = np.load(path)
    except Exception as e:  # not a .npy file, truncated, ...
        return f"unreadable ({e})"
    if got.dtype != want.dtype or got.shape != want.shape:
        return f"is {got.dtype}{list(got.shape)}, expected {want.dtype}{list(want.shape)}"
    finite = np.isfinite(want)
    if not np.array_equal(np.isfinite(got), finite) or not np.array_equal(got[~finite], want[~finite], equal_nan=True):
        return "non-finite entries (NaN/inf) differ"
    diff = np.abs(got[finite].astype(np.float64) - want[finite])
    if exact:
        bad = diff > 0
        tol = "exact"
    else:
        scale = max(1.0, float(np.abs(want[finite]).max(initial=0.0)))
        bad = diff > ATOL * scale + RTOL * np.abs(want[finite])
        tol = f"|diff| <= {ATOL:g}*{scale:.3g} + {RTOL:g}*|ref|"
    if bad.any():
        return f"differs: max |diff| {diff.max():.3g} ({int(bad.sum())} of {want.size} elements outside {tol})"
    return None


def check(out, cases):
    problems, n = [], 0
    files = {f: v for c in cases for f, v in c.files().items()}
    for f, (want, is_input) in files.items():
        path = out / f
        problem = compare(path, want, is_input) if path.is_file() else "missing"
        if problem:
            problems.append(f"{path}: {problem}")
        n += 1
    for stale in sorted(set(p.name for p in out.glob("*.npy")) - set(files)):
        problems.append(f"{out / stale}: not produced by make_reference.py (stale file?)")
    manifest, want = out / "manifest.txt", manifest_text(cases)
    got = manifest.read_text() if manifest.is_file() else None
    if got != want:
        diff = "" if got is None else "\n" + "".join(difflib.unified_diff(
            got.splitlines(True), want.splitlines(True), "committed", "generated"))
        problems.append(f"{manifest}: {'missing' if got is None else 'differs' + diff}")
    if problems:
        print("golden data check FAILED:\n  " + "\n  ".join(problems))
        print("(if the change is intended, regenerate: python3 reference/make_reference.py)")
        return 1
    print(f"golden data: {n + 1} files match ({len(cases)} cases in {out})")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true",
                    help="regenerate in memory and fail if the committed files differ")
    ap.add_argument("--out", type=Path, default=DATA_DIR, help=f"data directory (default {DATA_DIR})")
    args = ap.parse_args()
    cases = all_cases()
    if args.check:
        return check(args.out, cases)
    write(args.out, cases)
    return 0


if __name__ == "__main__":
    sys.exit(main())
