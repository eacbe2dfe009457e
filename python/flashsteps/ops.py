"""attention() and decode() for PyTorch (>= 2.4): the series' steps as torch.library custom ops.

The ops (flashsteps::attention_forward, ::attention_backward, ::decode, ::decode_paged) are opaque
to torch.compile (fullgraph works: the step is chosen and the arguments checked inside the op), have
fake implementations for tracing, and attention_forward has autograd: its backward runs a backward
step on the forward's O and LSE.

Layout: SDPA's, [batch, heads, seq, head_dim], which is the layout the kernels take
(docs/conventions.md, "Layout"), except a paged KV cache's pools of pages, [num_pages, page_size,
kv_heads, head_dim] (FlashAttention's flash_attn_with_kvcache and vLLM take the same); inputs that
are not contiguous are copied to contiguous tensors first (a copy, not an error), and the outputs
are contiguous.
"""
import math
from typing import Optional, Tuple

import torch
from torch import Tensor

from . import _lib

if not hasattr(torch.library, "custom_op"):
    raise ImportError(f"flashsteps.attention and .decode need PyTorch >= 2.4 (torch.library.custom_op); "
                      f"this is {torch.__version__}")
from ._lib import BACKWARD, DECODE, FORWARD, UsageError, library

_DTYPES = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}


_KV_LAYOUT = "[batch, heads, seq, head_dim]"
_PAGES_LAYOUT = "[num_pages, page_size, kv_heads, head_dim]"


def _check_tensors(what: str, q: Tensor, k: Tensor, v: Tensor, paged: bool = False) -> None:
    """What the library cannot see: the tensors' kind, device, dtype and how their shapes agree.
    paged: k and v are pools of pages, which share only head_dim with q."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, Tensor):
            raise TypeError(f"{what}: {name} must be a torch.Tensor")
        if t.dim() != 4:
            layout = _PAGES_LAYOUT if paged and name != "q" else _KV_LAYOUT
            raise UsageError(f"{what}: {name} must be 4-D {layout} (got shape {tuple(t.shape)})")
        if t.device.type != "cuda":
            raise UsageError(f"{what}: {name} is on {t.device}; the steps run on CUDA tensors")
        if t.dtype not in _DTYPES:
            raise UsageError(f"{what}: {name} is {t.dtype}; the steps run float32, float16 or bfloat16 "
                             "(each step its own: python -m flashsteps info)")
    if not (q.dtype == k.dtype == v.dtype):
        raise UsageError(f"{what}: q, k and v must have one dtype (got {q.dtype}, {k.dtype}, {v.dtype})")
    if not (q.device == k.device == v.device):
        raise UsageError(f"{what}: q, k and v must be on one device (got {q.device}, {k.device}, {v.device})")
    if k.shape != v.shape:
        raise UsageError(f"{what}: k and v must have one shape (got {tuple(k.shape)} and {tuple(v.shape)})")
    if paged and k.shape[3] != q.shape[3]:
        raise UsageError(f"{what}: q {tuple(q.shape)} and the pages {tuple(k.shape)} must agree in head_dim")
    if not paged and (k.shape[0] != q.shape[0] or k.shape[3] != q.shape[3]):
        raise UsageError(f"{what}: q {tuple(q.shape)} and k {tuple(k.shape)} must agree in batch and head_dim")


def _check_paged(what: str, q: Tensor, k_pages: Tensor, v_pages: Tensor, block_table: Tensor) -> None:
    """_check_tensors for a paged cache, and the block table's kind, shape, dtype and device: the
    kernel reads it as int32 on q's device (a table elsewhere would be a copy per call, or a bug)."""
    _check_tensors(what, q, k_pages, v_pages, paged=True)
    if not isinstance(block_table, Tensor):
        raise TypeError(f"{what}: block_table must be a torch.Tensor")
    if block_table.dim() != 2 or block_table.shape[0] != q.shape[0]:
        raise UsageError(f"{what}: block_table must be 2-D [batch, max_pages] with batch = {q.shape[0]} "
                         f"(got shape {tuple(block_table.shape)})")
    if block_table.dtype != torch.int32:
        raise UsageError(f"{what}: block_table must be int32 (got {block_table.dtype})")
    if block_table.device != q.device:
        raise UsageError(f"{what}: block_table is on {block_table.device}; it must be on q's device ({q.device})")


def _params(q: Tensor, k: Tensor, causal: bool, scale: Optional[float], variant: int = 0) -> "_lib.AttnParams":
    batch, heads, seq_q, head_dim = q.shape
    return _lib.params(batch, heads, k.shape[1], seq_q, k.shape[2], head_dim, _DTYPES[q.dtype], causal,
                       1.0 / math.sqrt(head_dim) if scale is None else scale, variant)


_defaults = {}  # (kind, device index): the default step, chosen once per device


def _step(name: str, kind: str, device) -> "_lib.Step":
    """A named step, or "" for the default of `kind` on `device` (the current one)."""
    if name:
        return library().step(name)
    if (kind, device.index) not in _defaults:
        _defaults[kind, device.index] = _lib.default_step(kind)
    return _defaults[kind, device.index]


def _backward_step(fwd_step: str, bwd_step: str, device) -> "_lib.Step":
    if not bwd_step and fwd_step and library().step(fwd_step).has_backward:
        return library().step(fwd_step)
    return _step(bwd_step, "backward", device)


def _variant(step: "_lib.Step", deterministic: bool) -> int:
    if not deterministic:
        return 0
    if "deterministic" not in step.variants:
        with_one = [s.name for s in library().steps if "deterministic" in s.variants and s.has_backward]
        variants = ", ".join(step.variants) or "none"
        raise UsageError(f"{step.name}: has no deterministic variant (its variants: {variants}; "
                         f"steps with one: {', '.join(with_one)})")
    return step.variants.index("deterministic")


def _plan(step, q, k, causal, scale, direction, variant=0):
    """The problem as the library takes it, refused by the step's own rule if it cannot run it, and
    the workspace the step needs (None, 0 if none)."""
    p = _params(q, k, causal, scale, variant)
    library().check(step, p, direction)
    n = library().workspace_size(step, p, direction)
    return p, (torch.empty(n, dtype=torch.uint8, device=q.device) if n else None), n


def _ptr(t: Optional[Tensor]):
    return None if t is None else t.data_ptr()


def _o_and_lse(q: Tensor):
    """A forward's outputs, real or fake: O like q (contiguous), LSE [batch, heads, seq_q] fp32."""
    return q.new_empty(q.shape), q.new_empty(q.shape[:3], dtype=torch.float32)


def _stream(device) -> int:
    return torch.cuda.current_stream(device).cuda_stream


# ---- attention ---------------------------------------------------------------------------------


@torch.library.custom_op("flashsteps::attention_forward", mutates_args=())
def attention_forward(q: Tensor, k: Tensor, v: Tensor, causal: bool, scale: Optional[float], step: str,
                      bwd_step: str, deterministic: bool) -> Tuple[Tensor, Tensor]:
    """O and LSE (fp32, natural log, [batch, heads, seq_q]). bwd_step and deterministic are for
    the backward (autograd keeps the forward's inputs)."""
    _check_tensors("flashsteps.attention", q, k, v)
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    o, lse = _o_and_lse(q)
    if q.numel() == 0:
        return o, lse.fill_(-math.inf)
    with torch.cuda.device(q.device):
        s = _step(step, "forward", q.device)
        p, ws, n = _plan(s, q, k, causal, scale, FORWARD)
        library().forward(s, p, q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), lse.data_ptr(), _ptr(ws), n,
                          _stream(q.device))
    return o, lse


@attention_forward.register_fake
def _(q, k, v, causal, scale, step, bwd_step, deterministic):
    return _o_and_lse(q)


@torch.library.custom_op("flashsteps::attention_backward", mutates_args=())
def attention_backward(dout: Tensor, q: Tensor, k: Tensor, v: Tensor, o: Tensor, lse: Tensor, causal: bool,
                       scale: Optional[float], step: str, bwd_step: str,
                       deterministic: bool) -> Tuple[Tensor, Tensor, Tensor]:
    """dQ, dK, dV (dK and dV summed over each K/V head's query heads with GQA)."""
    _check_tensors("flashsteps.attention backward", q, k, v)
    dout, q, k, v, o, lse = (t.contiguous() for t in (dout, q, k, v, o, lse))
    dq = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    dk = torch.empty(k.shape, dtype=k.dtype, device=k.device)
    dv = torch.empty(v.shape, dtype=v.dtype, device=v.device)
    if q.numel() == 0:
        return dq, dk.zero_(), dv.zero_()
    with torch.cuda.device(q.device):
        s = _backward_step(step, bwd_step, q.device)
        p, ws, n = _plan(s, q, k, causal, scale, BACKWARD, _variant(s, deterministic))
        library().backward(s, p, q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), dout.data_ptr(),
                           lse.data_ptr(), dq.data_ptr(), dk.data_ptr(), dv.data_ptr(), _ptr(ws), n,
                           _stream(q.device))
    return dq, dk, dv


@attention_backward.register_fake
def _(dout, q, k, v, o, lse, causal, scale, step, bwd_step, deterministic):
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def _setup_context(ctx, inputs, output):
    q, k, v, causal, scale, step, bwd_step, deterministic = inputs
    o, lse = output
    ctx.save_for_backward(q, k, v, o, lse)
    ctx.args = (causal, scale, step, bwd_step, deterministic)


def _backward(ctx, dout, dlse):
    # LSE is an output for the backward's sake; attention() does not return it, so dlse is unused.
    q, k, v, o, lse = ctx.saved_tensors
    dq, dk, dv = attention_backward(dout.contiguous(), q, k, v, o, lse, *ctx.args)
    return dq, dk, dv, None, None, None, None, None


attention_forward.register_autograd(_backward, setup_context=_setup_context)


def attention(q: Tensor, k: Tensor, v: Tensor, *, causal: bool = False, scale: Optional[float] = None,
              step=None, deterministic: bool = False) -> Tensor:
    """Scaled dot-product attention on the series' steps, in SDPA's layout.

    q: [batch, heads, seq_q, head_dim]; k, v: [batch, kv_heads, seq_k, head_dim], kv_heads dividing
    heads (fewer K/V heads than query heads is grouped-query attention, one is MQA: query head h
    reads K/V head h // (heads // kv_heads), as SDPA's enable_gqa). Returns O like q.

    causal: query i sees keys j <= i (top-left aligned, as SDPA's is_causal). scale: of Q·Kᵀ,
    1/sqrt(head_dim) by default (the tensor-core steps need it positive). Inputs that are not
    contiguous are copied to contiguous tensors first; the result is contiguous.

    step: None for the fastest the GPU runs (forward 19_hopper_pingpong_overlap on sm_90,
    11_tuned_forward elsewhere; backward 16_deterministic_backward); a step's name or number
    ("11") for its forward (and its backward if it has one, else the default backward); or a pair
    (forward step, backward step). deterministic: the backward step's "deterministic" variant
    (bitwise repeatable dQ; the forwards are deterministic already); a step without one refuses.

    What a step cannot run (a dtype, a head_dim, GQA on a step without it, ...) raises
    flashsteps.UsageError with the step's own reason, never a wrong number. Differentiable in q,
    k and v; works under torch.compile(fullgraph=True).
    """
    _check_tensors("flashsteps.attention", q, k, v)
    fwd_step, bwd_step = (step if isinstance(step, (tuple, list)) else (step, None))
    fwd_step = "" if fwd_step is None else str(fwd_step)
    bwd_step = "" if bwd_step is None else str(bwd_step)
    o, _ = attention_forward(q.contiguous(), k.contiguous(), v.contiguous(), bool(causal),
                             None if scale is None else float(scale), fwd_step, bwd_step, bool(deterministic))
    return o


# ---- decode ------------------------------------------------------------------------------------


def _decode_step(name: str, paged: bool, device) -> "_lib.Step":
    """The decode step (named, or the default of its form), refused here in this function's terms
    when it reads the other form of cache (the library's refusal names its C calls)."""
    s = _step(name, "paged_decode" if paged else "decode", device)
    if paged and not s.has_paged_decode:
        with_pages = ", ".join(t.name for t in library().steps if t.has_paged_decode) or "none in this library"
        also = "; it reads a contiguous one: decode without block_table" if s.has_decode else ""
        raise UsageError(f"{s.name}: runs no paged KV cache (decode with block_table: {with_pages}){also}")
    if not paged and s.has_paged_decode and not s.has_decode:
        contiguous = ", ".join(t.name for t in library().steps if t.has_decode) or "none in this library"
        raise UsageError(f"{s.name}: reads a paged KV cache only: pass block_table (a contiguous cache: "
                         f"{contiguous})")
    return s


@torch.library.custom_op("flashsteps::decode", mutates_args=())
def decode_op(q: Tensor, k_cache: Tensor, v_cache: Tensor, cache_seqlens: Tensor, causal: bool,
              scale: Optional[float], step: str) -> Tuple[Tensor, Tensor]:
    """O and LSE of attention over a KV cache (the decode step)."""
    _check_tensors("flashsteps.decode", q, k_cache, v_cache)
    q, k_cache, v_cache = q.contiguous(), k_cache.contiguous(), v_cache.contiguous()
    lens = cache_seqlens.to(device=q.device, dtype=torch.int32).contiguous()
    o, lse = _o_and_lse(q)
    if q.numel() == 0:
        return o, lse.fill_(-math.inf)
    with torch.cuda.device(q.device):
        s = _decode_step(step, False, q.device)
        p, ws, n = _plan(s, q, k_cache, causal, scale, DECODE)
        # The lengths are read on the host once (a synchronisation): a length outside the cache
        # would read past it, a wrong number rather than an error.
        low, high = int(lens.min()), int(lens.max())
        shortest = q.shape[2] if causal else 0
        if low < shortest or high > k_cache.shape[2]:
            why = "the cache's capacity" + ("; causal: at least seq_q" if causal else "")
            raise UsageError(f"flashsteps.decode: cache_seqlens must lie in [{shortest}, {k_cache.shape[2]}] "
                             f"({why}); got {low} to {high}")
        library().decode(s, p, q.data_ptr(), k_cache.data_ptr(), v_cache.data_ptr(), lens.data_ptr(), o.data_ptr(),
                         lse.data_ptr(), _ptr(ws), n, _stream(q.device))
    return o, lse


@decode_op.register_fake
def _(q, k_cache, v_cache, cache_seqlens, causal, scale, step):
    return _o_and_lse(q)


def _decode_backward(ctx, dout, dlse):
    raise NotImplementedError("flashsteps.decode has no backward: no backward step runs a KV cache; "
                              "train with flashsteps.attention")


decode_op.register_autograd(_decode_backward)

_INT_MAX = 2**31 - 1  # the C ABI's sizes are int


@torch.library.custom_op("flashsteps::decode_paged", mutates_args=())
def decode_paged_op(q: Tensor, k_pages: Tensor, v_pages: Tensor, cache_seqlens: Tensor, block_table: Tensor,
                    causal: bool, scale: Optional[float], step: str) -> Tuple[Tensor, Tensor]:
    """O and LSE of attention over a paged KV cache (the paged decode step)."""
    what = "flashsteps.decode"
    _check_paged(what, q, k_pages, v_pages, block_table)
    q, k_pages, v_pages, table = q.contiguous(), k_pages.contiguous(), v_pages.contiguous(), block_table.contiguous()
    lens = cache_seqlens.to(device=q.device, dtype=torch.int32).contiguous()
    o, lse = _o_and_lse(q)
    if q.numel() == 0:
        return o, lse.fill_(-math.inf)
    num_pages, page_size, kv_heads, head_dim = k_pages.shape
    max_pages = table.shape[1]
    # The capacity of a sequence is what its row of the table reaches: the library's seq_k.
    capacity = max_pages * page_size
    if max(capacity, num_pages) > _INT_MAX:
        raise UsageError(f"{what}: {max_pages} pages per sequence of {page_size} keys and a pool of {num_pages} "
                         f"pages must stay below 2^31 keys and pages")
    batch, heads, seq_q, _ = q.shape
    with torch.cuda.device(q.device):
        s = _decode_step(step, True, q.device)
        p = _lib.params(batch, heads, kv_heads, seq_q, capacity, head_dim, _DTYPES[q.dtype], causal,
                        1.0 / math.sqrt(head_dim) if scale is None else scale)
        library().check_paged(s, p, page_size, num_pages, max_pages)
        n = library().workspace_size_paged(s, p, page_size, num_pages, max_pages)
        ws = torch.empty(n, dtype=torch.uint8, device=q.device) if n else None
        # The lengths, and the table entries they reach, are read on the host once (one synchronisation):
        # a length past the table's row or a page outside the pool would read outside the pool, a wrong
        # number or a fault rather than an error. Entries past a sequence's pages are never read.
        reached = torch.arange(max_pages, device=q.device)[None, :] < ((lens + page_size - 1) // page_size)[:, None]
        outside = reached & ((table < 0) | (table >= num_pages))
        low, high, n_outside = torch.stack([lens.min().long(), lens.max().long(), outside.sum()]).tolist()
        shortest = seq_q if causal else 0
        if low < shortest or high > capacity:
            why = f"max_pages·page_size = {max_pages}·{page_size}" + ("; causal: at least seq_q" if causal else "")
            raise UsageError(f"{what}: cache_seqlens must lie in [{shortest}, {capacity}] ({why}); got {low} to {high}")
        if n_outside:
            b, j = (int(x) for x in outside.nonzero()[0])
            raise UsageError(f"{what}: block_table[{b}, {j}] = {int(table[b, j])} is outside the pool of {num_pages} "
                             f"pages; sequence {b} (length {int(lens[b])}) reads its first "
                             f"{(int(lens[b]) + page_size - 1) // page_size} entries")
        library().decode_paged(s, p, page_size, num_pages, max_pages, q.data_ptr(), k_pages.data_ptr(),
                               v_pages.data_ptr(), table.data_ptr(), lens.data_ptr(), o.data_ptr(), lse.data_ptr(),
                               _ptr(ws), n, _stream(q.device))
    return o, lse


@decode_paged_op.register_fake
def _(q, k_pages, v_pages, cache_seqlens, block_table, causal, scale, step):
    return _o_and_lse(q)


decode_paged_op.register_autograd(_decode_backward)


def decode(q: Tensor, k_cache: Tensor, v_cache: Tensor, cache_seqlens: Tensor, *, block_table: Optional[Tensor] = None,
           causal: bool = False, scale: Optional[float] = None, step=None) -> Tensor:
    """Attention of a few new query rows over a KV cache with a length per sequence (decoding).

    q: [batch, heads, seq_q, head_dim], seq_q at most 64 (the decode step's limit); k_cache,
    v_cache: [batch, kv_heads, capacity, head_dim] (SDPA's layout, as attention()); cache_seqlens:
    [batch] integers on the device, each in [0, capacity]: sequence b attends to its first
    cache_seqlens[b] keys, the rest of the cache is never read. They are checked on the host
    (one synchronisation per call). causal: query i sits at position len - seq_q + i (aligned to
    the sequence's end) and sees keys up to it; each length must then be at least seq_q. A
    sequence of length 0 gives zeros. Inputs that are not contiguous are copied first.

    block_table: a paged cache instead. k_cache, v_cache are then pools of pages, [num_pages,
    page_size, kv_heads, head_dim], and block_table [batch, max_pages] int32 on q's device:
    sequence b's key j is row j % page_size of page block_table[b, j // page_size]. The capacity
    is max_pages * page_size; the entries a sequence's length reaches must name pages of the pool
    (checked on the host with the lengths), the others are never read (-1 is fine there).

    step: None for 22_split_kv_decode (23_paged_kv_decode with block_table), or a step's name or
    number that runs that form of cache. Forward only: its gradient raises NotImplementedError.
    """
    what = "flashsteps.decode"
    if block_table is None:
        _check_tensors(what, q, k_cache, v_cache)
    else:
        _check_paged(what, q, k_cache, v_cache, block_table)
    if not isinstance(cache_seqlens, Tensor) or cache_seqlens.shape != (q.shape[0],):
        raise UsageError(f"{what}: cache_seqlens must be a tensor of shape [batch] = [{q.shape[0]}]")
    if cache_seqlens.dtype not in (torch.int32, torch.int64):
        raise UsageError(f"{what}: cache_seqlens must be int32 or int64 (got {cache_seqlens.dtype})")
    args = (None if scale is None else float(scale), "" if step is None else str(step))
    if block_table is None:
        o, _ = decode_op(q.contiguous(), k_cache.contiguous(), v_cache.contiguous(), cache_seqlens, bool(causal), *args)
    else:
        o, _ = decode_paged_op(q.contiguous(), k_cache.contiguous(), v_cache.contiguous(), cache_seqlens,
                               block_table.contiguous(), bool(causal), *args)
    return o
