"""GPU tests of flashsteps.attention and flashsteps.decode (PyTorch and a CUDA GPU; skipped otherwise).

Correctness is FlashAttention's rule (docs/conventions.md, "Correctness"): per row, the error
against an fp64 reference is at most twice the error of a plain implementation in the same dtype
(S, P, O rounded; in the backward also dP, dS and the gradients), plus one ulp of the row's largest
value. Shapes are drawn at random with odd lengths, GQA and MQA, causal and not. Decoding over a
paged cache is held to the same rule and, bit for bit, to the contiguous decode of the same cache.
"""
import math
import random

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install torch)")

import flashsteps  # noqa: E402

pytest.importorskip("flashsteps.ops", reason="flashsteps.ops does not import (PyTorch >= 2.4 needed)")

pytestmark = pytest.mark.gpu

if not torch.cuda.is_available():
    pytest.skip("no CUDA GPU visible to PyTorch", allow_module_level=True)
try:
    LIB = flashsteps.library()
    CC, GPU = LIB.device()
except flashsteps.FlashStepsError as e:
    pytest.skip(f"flashsteps cannot run here: {e}", allow_module_level=True)

DEV = torch.device("cuda")
DTYPES = (torch.float16, torch.bfloat16)
FWD_STEPS = [s.name for s in LIB.steps if s.has_forward and "fp16" in s.dtypes and s.gqa and not LIB.runs_here(s)
             and not s.has_decode]


# ---- references ---------------------------------------------------------------------------------


def expand_kv(t, heads):
    return t.repeat_interleave(heads // t.shape[1], dim=1)


def mask_of(sq, sk, causal, device):
    if not causal:
        return None
    i = torch.arange(sq, device=device)[:, None]
    j = torch.arange(sk, device=device)[None, :]
    return j > i  # top-left aligned, as SDPA's is_causal


def softmax_rows(s):
    """Softmax over the last dim, fp64; a row with no visible key gives zeros (the series' rule)."""
    m = s.amax(-1, keepdim=True)
    m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    e = torch.exp(s - m)
    z = e.sum(-1, keepdim=True)
    return torch.where(z > 0, e / z.clamp_min(1e-300), torch.zeros_like(e))


def forward_ref(q, k, v, causal, scale, dtype=None):
    """O in fp64; with `dtype`, S, P and O rounded to it (the same-dtype reference)."""
    rnd = (lambda x: x.to(dtype).double()) if dtype else (lambda x: x)
    heads = q.shape[1]
    q, k, v = q.double(), expand_kv(k.double(), heads), expand_kv(v.double(), heads)
    s = rnd(scale * q @ k.transpose(-1, -2))
    m = mask_of(q.shape[2], k.shape[2], causal, q.device)
    if m is not None:
        s = s.masked_fill(m, -math.inf)
    p = rnd(softmax_rows(s))
    return rnd(p @ v), p


def backward_ref(q, k, v, o_given, dout, causal, scale, dtype=None, delta_from_given=False):
    """dQ, dK, dV in fp64 (dK, dV summed over each K/V head's query heads). With `dtype`: S, P, O, dP,
    dS and the gradients rounded, delta = rowsum(dO * O) of the given 16-bit O. delta_from_given:
    fp64 otherwise, but delta from the given O (what that O's rounding alone moves)."""
    rnd = (lambda x: x.to(dtype).double()) if dtype else (lambda x: x)
    heads, kv_heads = q.shape[1], k.shape[1]
    o, p = forward_ref(q, k, v, causal, scale, dtype)
    qd, kd, vd, do = q.double(), expand_kv(k.double(), heads), expand_kv(v.double(), heads), dout.double()
    dv = rnd(p.transpose(-1, -2) @ do)
    dp = rnd(do @ vd.transpose(-1, -2))
    delta = (do * (o_given.double() if (dtype or delta_from_given) else o)).sum(-1, keepdim=True)
    ds = rnd(p * (dp - delta))
    dq = rnd(scale * ds @ kd)
    dk = rnd(scale * ds.transpose(-1, -2) @ qd)
    group = heads // kv_heads

    def fold(t):  # [B, H, S, D] -> [B, KVH, S, D], the sum over each group
        return t.view(t.shape[0], kv_heads, group, *t.shape[2:]).sum(2)

    return dq, rnd(fold(dk)) if dtype else fold(dk), rnd(fold(dv)) if dtype else fold(dv)


def ulp(x, dtype):
    """One ulp of `dtype` at |x| (x fp64)."""
    mant = {torch.float16: 10, torch.bfloat16: 7}[dtype]
    e = torch.floor(torch.log2(x.abs().clamp_min(2.0 ** -100)))
    return torch.pow(2.0, e - mant)


def assert_rule(name, out, ref, lowp, dtype, extra=None, floor=0.0):
    """Per row (last dim): max|out - ref| <= 2 max|lowp - ref| + ulp(max|ref|) (+ extra, + floor)."""
    err = (out.double() - ref).abs().amax(-1)
    bound = 2 * (lowp - ref).abs().amax(-1) + ulp(ref.abs().amax(-1), dtype) + 2.0 ** -100 + floor
    if extra is not None:
        bound = bound + extra
    bad = err > bound
    assert torch.isfinite(out).all(), f"{name}: not finite"
    assert not bad.any(), (f"{name}: {int(bad.sum())} rows over the bound; worst error {float(err.max()):.3g}, "
                           f"bound there {float(bound.flatten()[int((err - bound).argmax())]):.3g}")


# ---- shapes ---------------------------------------------------------------------------------------

rng = random.Random(39)


def random_shape():
    heads = rng.choice((1, 2, 4, 6))
    kv_heads = rng.choice([h for h in (1, 2, 3, 4, 6) if heads % h == 0])
    return dict(batch=rng.choice((1, 2, 3)), heads=heads, kv_heads=kv_heads,
                seq_q=rng.choice((1, 7, 65, 128, 191, 257)), seq_k=rng.choice((1, 9, 64, 129, 200, 333)),
                head_dim=rng.choice((64, 128, 40, 96)),
                causal=rng.random() < 0.5)


SHAPES = [random_shape() for _ in range(8)] + [
    dict(batch=2, heads=8, kv_heads=1, seq_q=300, seq_k=300, head_dim=64, causal=True),  # MQA
    dict(batch=1, heads=4, kv_heads=2, seq_q=513, seq_k=97, head_dim=128, causal=True),  # longer Q than K
    dict(batch=1, heads=2, kv_heads=2, seq_q=33, seq_k=1000, head_dim=64, causal=True),  # keys beyond seq_q unseen
]


def draw(batch, heads, kv_heads, seq_q, seq_k, head_dim, dtype, requires_grad=False, **_):
    g = torch.Generator(device=DEV).manual_seed(hash((batch, heads, kv_heads, seq_q, seq_k, head_dim)) % 2**31)

    def t(*shape):
        x = (torch.rand(*shape, generator=g, device=DEV) * 2 - 0.5).to(dtype)  # [-0.5, 1.5): O away from 0
        return x.requires_grad_(requires_grad)

    return t(batch, heads, seq_q, head_dim), t(batch, kv_heads, seq_k, head_dim), t(batch, kv_heads, seq_k, head_dim)


def shape_id(s):
    return "B{batch}H{heads}KV{kv_heads}Sq{seq_q}Sk{seq_k}D{head_dim}{c}".format(**s, c="c" if s["causal"] else "")


# ---- the forward ----------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
def test_forward_rule(shape, dtype):
    q, k, v = draw(**shape, dtype=dtype)
    scale = shape["head_dim"] ** -0.5
    out = flashsteps.attention(q, k, v, causal=shape["causal"])
    ref, _ = forward_ref(q, k, v, shape["causal"], scale)
    lowp, _ = forward_ref(q, k, v, shape["causal"], scale, dtype)
    assert out.shape == q.shape and out.dtype == dtype and out.is_contiguous()
    assert_rule("O", out, ref, lowp, dtype)


@pytest.mark.parametrize("step", FWD_STEPS)
def test_every_forward_step_that_runs_here(step):
    shape = dict(batch=2, heads=4, kv_heads=2, seq_q=129, seq_k=77, head_dim=64, causal=True)
    q, k, v = draw(**shape, dtype=torch.float16)
    out = flashsteps.attention(q, k, v, causal=True, step=step)
    ref, _ = forward_ref(q, k, v, True, 0.125)
    lowp, _ = forward_ref(q, k, v, True, 0.125, torch.float16)
    assert_rule(f"O of {step}", out, ref, lowp, torch.float16)


def test_matches_sdpa_and_takes_any_strides():
    q, k, v = draw(2, 4, 4, 100, 100, 64, torch.bfloat16)
    qt = q.transpose(1, 2).contiguous().transpose(1, 2)  # same values, [B, S, H, D] memory
    warm_up(q, k, v, causal=True, scale=0.2)
    out = flashsteps.attention(qt, k, v, causal=True, scale=0.2)
    sdpa = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.2)
    assert (out.float() - sdpa.float()).abs().max() < 0.05
    assert torch.equal(out, flashsteps.attention(q, k, v, causal=True, scale=0.2))


# ---- the backward ---------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES[:6] + SHAPES[-3:], ids=shape_id)
def test_gradients_rule(shape, dtype):
    q, k, v = draw(**shape, dtype=dtype, requires_grad=True)
    scale = shape["head_dim"] ** -0.5
    out = flashsteps.attention(q, k, v, causal=shape["causal"])
    dout = torch.rand_like(out) * 2 - 1
    out.backward(dout)
    ref = backward_ref(q, k, v, out.detach(), dout, shape["causal"], scale)
    lowp = backward_ref(q, k, v, out.detach(), dout, shape["causal"], scale, dtype)
    given = backward_ref(q, k, v, out.detach(), dout, shape["causal"], scale, delta_from_given=True)
    for name, got, r, lo, g in zip(("dQ", "dK", "dV"), (q.grad, k.grad, v.grad), ref, lowp, given):
        extra = None if name == "dV" else (g - r).abs().amax(-1)
        assert got.shape == r.shape
        assert_rule(name, got, r, lo, dtype, extra=extra, floor=1e-5)


def test_deterministic_backward_is_bitwise_repeatable():
    shape = dict(batch=2, heads=8, kv_heads=2, seq_q=700, seq_k=700, head_dim=128, causal=True)
    grads = []
    for _ in range(4):
        q, k, v = draw(**shape, dtype=torch.bfloat16, requires_grad=True)
        out = flashsteps.attention(q, k, v, causal=True, deterministic=True)
        out.backward(torch.ones_like(out))
        grads.append((out.detach(), q.grad, k.grad, v.grad))
    # The first run tunes the problem's class (steps 11 and 16 time their candidates on it): compare the rest.
    for later in grads[2:]:
        for a, b in zip(grads[1], later):
            assert torch.equal(a, b)


def test_refusals_are_the_steps_own():
    q, k, v = draw(1, 2, 2, 16, 16, 64, torch.float16)
    with pytest.raises(flashsteps.UsageError, match="head_dim must be a multiple of 8"):
        flashsteps.attention(q[..., :60], k[..., :60], v[..., :60])
    with pytest.raises(flashsteps.UsageError, match="computes in fp16/bf16 only"):
        flashsteps.attention(q.float(), k.float(), v.float(), step="11")
    with pytest.raises(flashsteps.UsageError, match="no grouped-query attention"):
        flashsteps.attention(q, k[:, :1], v[:, :1], step="10")
    with pytest.raises(flashsteps.UsageError, match="float64"):
        flashsteps.attention(q.double(), k.double(), v.double())
    with pytest.raises(flashsteps.UsageError, match="the softmax scale must be positive"):
        flashsteps.attention(q, k, v, scale=-1.0)
    qg = q.clone().requires_grad_()
    out = flashsteps.attention(qg, k, v, step=("11", "13"), deterministic=True)
    with pytest.raises(flashsteps.UsageError, match="has no deterministic variant"):
        out.sum().backward()


def test_fp32_steps_on_request():
    q, k, v = draw(1, 2, 2, 70, 50, 64, torch.float32, requires_grad=True)
    out = flashsteps.attention(q, k, v, causal=True, step="08")
    out.backward(torch.ones_like(out))
    ref, _ = forward_ref(q, k, v, True, 0.125)
    assert (out.double() - ref).abs().max() < 1e-5
    dq, dk, dv = backward_ref(q, k, v, out.detach(), torch.ones_like(out), True, 0.125)
    for got, r in ((q.grad, dq), (k.grad, dk), (v.grad, dv)):
        assert (got.double() - r).abs().max() < 1e-4 * max(1.0, float(r.abs().max()))


# ---- torch.library: opcheck and torch.compile -----------------------------------------------------


def warm_up(q, k, v, **kw):
    """One forward and backward of the problem's class first: the autotuned steps (11, 16) time their
    candidates on the first call of a class, whose output comes from whichever ran last."""
    q, k, v = (t.detach().clone().requires_grad_() for t in (q, k, v))
    flashsteps.attention(q, k, v, **kw).sum().backward()


def test_opcheck_attention():
    # deterministic: opcheck compares repeated runs with assert_close's fp16 tolerance (about one ulp).
    for shape in (SHAPES[0], SHAPES[-2]):
        q, k, v = draw(**shape, dtype=torch.float16, requires_grad=True)
        warm_up(q, k, v, causal=shape["causal"], deterministic=True)
        args = (q, k, v, shape["causal"], None, "", "", True)
        torch.library.opcheck(torch.ops.flashsteps.attention_forward.default, args)
        o, lse = torch.ops.flashsteps.attention_forward(*args)
        dout = torch.rand_like(o)
        # Every input detached: the backward op has no autograd formula of its own (no double backward), and
        # opcheck's AOT test would differentiate through it if one of them required a gradient.
        bwd_args = (dout, q.detach(), k.detach(), v.detach(), o.detach(), lse.detach(), shape["causal"], None, "", "",
                    True)
        torch.library.opcheck(torch.ops.flashsteps.attention_backward.default, bwd_args)


def test_opcheck_decode():
    q, k, v = draw(3, 8, 2, 1, 300, 128, torch.float16)
    lens = torch.tensor([300, 1, 170], dtype=torch.int32, device=DEV)
    flashsteps.decode(q, k, v, lens)
    torch.library.opcheck(torch.ops.flashsteps.decode.default, (q, k, v, lens, False, None, ""))


def test_compile_fullgraph_forward_and_backward():
    def block(q, k, v):
        return flashsteps.attention(q * 1.0, k, v, causal=True, deterministic=True).float().square().sum()

    compiled = torch.compile(block, fullgraph=True)
    for shape in (dict(batch=2, heads=4, kv_heads=2, seq_q=128, seq_k=128, head_dim=64),
                  dict(batch=1, heads=4, kv_heads=4, seq_q=77, seq_k=77, head_dim=128)):
        q, k, v = draw(**shape, dtype=torch.bfloat16, requires_grad=True)
        warm_up(q, k, v, causal=True, deterministic=True)
        loss = compiled(q, k, v)
        loss.backward()
        q2, k2, v2 = (t.detach().clone().requires_grad_() for t in (q, k, v))
        eager = block(q2, k2, v2)
        eager.backward()
        # The same kernels on the same inputs; only the fused reduction around them may sum in another order.
        torch.testing.assert_close(loss, eager, rtol=1e-4, atol=0)
        for a, b in ((q.grad, q2.grad), (k.grad, k2.grad), (v.grad, v2.grad)):
            torch.testing.assert_close(a, b, rtol=1e-2, atol=1e-2)


def test_compile_fullgraph_decode():
    q, k, v = draw(2, 8, 2, 1, 256, 64, torch.float16)
    lens = torch.tensor([256, 31], dtype=torch.int32, device=DEV)
    flashsteps.decode(q, k, v, lens)
    compiled = torch.compile(lambda *a: flashsteps.decode(*a), fullgraph=True)
    assert torch.equal(compiled(q, k, v, lens), flashsteps.decode(q, k, v, lens))


def test_opcheck_and_compile_paged_decode():
    q, k, v = draw(3, 8, 2, 1, 320, 128, torch.bfloat16)
    lens = torch.tensor([320, 1, 170], dtype=torch.int32, device=DEV)
    kp, vp, table = page_cache(k, v, lens, 16, seed=5)
    flashsteps.decode(q, kp, vp, lens, block_table=table)
    torch.library.opcheck(torch.ops.flashsteps.decode_paged.default, (q, kp, vp, lens, table, False, None, ""))
    compiled = torch.compile(lambda q, k, v, n, t: flashsteps.decode(q, k, v, n, block_table=t), fullgraph=True)
    assert torch.equal(compiled(q, kp, vp, lens, table), flashsteps.decode(q, kp, vp, lens, block_table=table))


# ---- decode ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("causal", (False, True))
@pytest.mark.parametrize("kv_heads", (8, 2, 1))
def test_decode_rule(kv_heads, causal):
    seq_q = 4 if causal else 1
    q, kc, vc = draw(3, 8, kv_heads, seq_q, 1000, 128, torch.bfloat16)
    lens = torch.tensor([1000, 7, 513], device=DEV)
    kc[1, :, 7:] = float("nan")  # past a sequence's length: never read
    vc[1, :, 7:] = float("nan")
    out = flashsteps.decode(q, kc, vc, lens, causal=causal)
    for b in range(3):
        n = int(lens[b])
        sl = (slice(b, b + 1), slice(None), slice(None, n))
        qb, kb, vb = q[b:b + 1], kc[sl], vc[sl]
        ref, _ = _decode_ref(qb, kb, vb, causal, None)
        lowp, _ = _decode_ref(qb, kb, vb, causal, torch.bfloat16)
        assert_rule(f"decode O of sequence {b}", out[b:b + 1], ref, lowp, torch.bfloat16)


def _decode_ref(q, k, v, causal, dtype):
    """Causal aligned to the sequence's end: the query rows are the last seq_q of seq_k."""
    if not causal:
        return forward_ref(q, k, v, False, q.shape[-1] ** -0.5, dtype)
    sq, sk = q.shape[2], k.shape[2]
    pad = torch.zeros(*q.shape[:2], sk - sq, q.shape[3], dtype=q.dtype, device=q.device)
    o, p = forward_ref(torch.cat([pad, q], 2), k, v, True, q.shape[-1] ** -0.5, dtype)
    return o[:, :, sk - sq:], p[:, :, sk - sq:]


def test_decode_refusals():
    q, kc, vc = draw(2, 4, 2, 1, 64, 64, torch.float16)
    with pytest.raises(flashsteps.UsageError, match=r"cache_seqlens must lie in \[0, 64\]"):
        flashsteps.decode(q, kc, vc, torch.tensor([65, 3], device=DEV))
    with pytest.raises(flashsteps.UsageError, match="seq_q at most 64"):
        flashsteps.decode(torch.cat([q] * 65, 2), kc, vc, torch.tensor([64, 3], device=DEV))
    with pytest.raises(flashsteps.UsageError, match="shape \\[batch\\]"):
        flashsteps.decode(q, kc, vc, torch.tensor([3], device=DEV))


# ---- decode over a paged cache --------------------------------------------------------------------


def page_cache(kc, vc, lens, page_size, spare=3, seed=0):
    """The caches kc, vc [batch, kv_heads, capacity, head_dim] (capacity a multiple of page_size) as pools of
    pages [num_pages, page_size, kv_heads, head_dim] and a block table [batch, capacity / page_size] int32:
    each sequence's pages drawn from a shuffled pool, so that neighbours in a sequence are not neighbours in
    the pool. Every row that no length reaches (the spare pages, the tail of a last page) is NaN, and the
    table's entries past a sequence's pages are -1: a kernel that reads either fails."""
    batch, kv_heads, capacity, head_dim = kc.shape
    assert capacity % page_size == 0
    lens = [int(n) for n in lens]
    need = [(n + page_size - 1) // page_size for n in lens]
    num_pages = sum(need) + spare
    order = torch.randperm(num_pages, generator=torch.Generator().manual_seed(seed))
    table = torch.full((batch, capacity // page_size), -1, dtype=torch.int32)
    pools = [torch.full((num_pages, page_size, kv_heads, head_dim), float("nan"), dtype=kc.dtype, device=kc.device)
             for _ in range(2)]
    used = 0
    for b, n in enumerate(lens):
        table[b, :need[b]] = order[used:used + need[b]].to(torch.int32)
        used += need[b]
        j = torch.arange(n)
        page, row = table[b, j // page_size].long().to(kc.device), (j % page_size).to(kc.device)
        for pool, cache in zip(pools, (kc, vc)):
            pool[page, row] = cache[b, :, :n].transpose(0, 1)  # [n, kv_heads, head_dim]
            # The pool read back through the table is the sequence's cache (this helper checked, not the kernel).
            assert torch.equal(pool[page, row].transpose(0, 1), cache[b, :, :n])
    return pools[0], pools[1], table.to(kc.device)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("page_size", (1, 16, 256))
@pytest.mark.parametrize("kv_heads, causal", ((8, False), (2, True), (1, False), (1, True)), ids=("MHA", "GQA-causal",
                                                                                                  "MQA", "MQA-causal"))
def test_paged_decode_rule_and_the_contiguous_cache(kv_heads, causal, page_size, dtype):
    """Lengths 0 and 1 (not causal: a causal sequence needs seq_q keys), and ones that are not multiples of
    16 or 256, over a capacity of 768 keys; causal with 4 query rows (speculative decoding)."""
    seq_q = 4 if causal else 1
    lens = torch.tensor([4, 17, 517, 768] if causal else [0, 1, 517, 768], dtype=torch.int32, device=DEV)
    q, kc, vc = draw(4, 8, kv_heads, seq_q, 768, 128, dtype)
    for b, n in enumerate(lens.tolist()):  # past each length: never read, in either form
        kc[b, :, n:] = float("nan")
        vc[b, :, n:] = float("nan")
    kp, vp, table = page_cache(kc, vc, lens, page_size, seed=page_size * 10 + kv_heads)
    o, lse = torch.ops.flashsteps.decode_paged(q, kp, vp, lens, table, causal, None, "")
    # The default paged step is step 22's kernel with the gather in place of its tile copy: the same tiles,
    # and the same split plan (both take it from seq_k, here one capacity of 768 keys), so the same bits.
    want_o, want_lse = torch.ops.flashsteps.decode(q, kc, vc, lens, causal, None, "")
    assert torch.equal(o, want_o) and torch.equal(lse, want_lse), "paged and contiguous decode differ"
    assert torch.equal(flashsteps.decode(q, kp, vp, lens, block_table=table, causal=causal), o)
    assert o.shape == q.shape and o.dtype == dtype and lse.shape == (4, 8, seq_q)
    for b, n in enumerate(lens.tolist()):
        if n == 0:  # no key: O = 0, LSE = -inf (docs/conventions.md, "KV cache")
            assert torch.equal(o[b], torch.zeros_like(o[b])) and bool((lse[b] == -math.inf).all())
            continue
        qb, kb, vb = q[b:b + 1], kc[b:b + 1, :, :n], vc[b:b + 1, :, :n]
        ref, _ = _decode_ref(qb, kb, vb, causal, None)
        lowp, _ = _decode_ref(qb, kb, vb, causal, dtype)
        assert_rule(f"paged decode O of sequence {b} (length {n})", o[b:b + 1], ref, lowp, dtype)


def test_paged_decode_refusals():
    q, kc, vc = draw(2, 4, 2, 1, 64, 64, torch.float16)
    lens = torch.tensor([64, 3], dtype=torch.int32, device=DEV)
    kp, vp, table = page_cache(kc, vc, lens, 16)  # 4 + 1 pages and 3 spare; capacity 64
    num_pages = kp.shape[0]

    def refused(match, q=q, kp=kp, vp=vp, lens=lens, table=table, **kw):
        with pytest.raises(flashsteps.UsageError, match=match):
            flashsteps.decode(q, kp, vp, lens, block_table=table, **kw)

    flashsteps.decode(q, kp, vp, lens, block_table=table)  # accepted as it is
    refused(r"cache_seqlens must lie in \[0, 64\] \(max_pages·page_size = 4·16\); got 3 to 65",
            lens=torch.tensor([65, 3], dtype=torch.int32, device=DEV))
    refused(r"cache_seqlens must lie in \[4, 64\]", q=torch.cat([q] * 4, 2), causal=True)  # 3 keys, 4 queries
    bad = table.clone()
    bad[1, 0] = num_pages
    refused(rf"block_table\[1, 0\] = {num_pages} is outside the pool of {num_pages} pages; sequence 1 "
            r"\(length 3\) reads its first 1 entries", table=bad)
    bad = table.clone()
    bad[0, 3] = -1
    refused(r"block_table\[0, 3\] = -1 is outside the pool", table=bad)
    far = table.clone()
    far[1, 1:] = 1 << 30  # past sequence 1's one page: never read, not refused
    assert torch.equal(flashsteps.decode(q, kp, vp, lens, block_table=far), flashsteps.decode(q, kp, vp, lens,
                                                                                              block_table=table))
    refused("a paged KV cache needs a page size of at least 1 \\(got 0\\)", kp=kp[:, :0], vp=vp[:, :0])
    refused("seq_q at most 64", q=torch.cat([q] * 65, 2))
    refused("computes in fp16/bf16 only", q=q.float(), kp=kp.float(), vp=vp.float())
    refused("22_split_kv_decode: runs no paged KV cache \\(decode with block_table: 23_paged_kv_decode\\); it reads "
            "a contiguous one: decode without block_table", step="22")
    refused("block_table must be int32", table=table.long())
    only_paged = "23_paged_kv_decode: reads a paged KV cache only: pass block_table"
    with pytest.raises(flashsteps.UsageError, match=only_paged):
        flashsteps.decode(q, kc, vc, lens, step="23")
