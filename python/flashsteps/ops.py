"""attention() and decode() for PyTorch (>= 2.4): the series' steps as torch.library custom ops.

Both ops (flashsteps::attention_forward, ::attention_backward, ::decode) are opaque to
torch.compile (fullgraph works: the step is chosen and the arguments checked inside the op), have
fake implementations for tracing, and attention_forward has autograd: its backward runs a backward
step on the forward's O and LSE.

Layout: SDPA's, [batch, heads, seq, head_dim], which is the layout the kernels take
(docs/conventions.md, "Layout"); inputs that are not contiguous are copied to contiguous tensors
first (a copy, not an error), and the outputs are contiguous.
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


def _check_tensors(what: str, q: Tensor, k: Tensor, v: Tensor) -> None:
    """What the library cannot see: the tensors' kind, device, dtype and how their shapes agree."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, Tensor):
            raise TypeError(f"{what}: {name} must be a torch.Tensor")
        if t.dim() != 4:
            raise UsageError(f"{what}: {name} must be 4-D [batch, heads, seq, head_dim] (got shape {tuple(t.shape)})")
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
    if k.shape[0] != q.shape[0] or k.shape[3] != q.shape[3]:
        raise UsageError(f"{what}: q {tuple(q.shape)} and k {tuple(k.shape)} must agree in batch and head_dim")


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
        s = _step(step, "decode", q.device)
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


def decode(q: Tensor, k_cache: Tensor, v_cache: Tensor, cache_seqlens: Tensor, *, causal: bool = False,
           scale: Optional[float] = None, step=None) -> Tensor:
    """Attention of a few new query rows over a KV cache with a length per sequence (decoding).

    q: [batch, heads, seq_q, head_dim], seq_q at most 64 (the decode step's limit); k_cache,
    v_cache: [batch, kv_heads, capacity, head_dim] (SDPA's layout, as attention()); cache_seqlens:
    [batch] integers on the device, each in [0, capacity]: sequence b attends to its first
    cache_seqlens[b] keys, the rest of the cache is never read. They are checked on the host
    (one synchronisation per call). causal: query i sits at position len - seq_q + i (aligned to
    the sequence's end) and sees keys up to it; each length must then be at least seq_q. A
    sequence of length 0 gives zeros. Inputs that are not contiguous are copied first.

    step: None for 22_split_kv_decode, or a step's name or number that runs a KV cache. Forward
    only: its gradient raises NotImplementedError.
    """
    _check_tensors("flashsteps.decode", q, k_cache, v_cache)
    if not isinstance(cache_seqlens, Tensor) or cache_seqlens.shape != (q.shape[0],):
        raise UsageError(f"flashsteps.decode: cache_seqlens must be a tensor of shape [batch] = [{q.shape[0]}]")
    if cache_seqlens.dtype not in (torch.int32, torch.int64):
        raise UsageError(f"flashsteps.decode: cache_seqlens must be int32 or int64 (got {cache_seqlens.dtype})")
    o, _ = decode_op(q.contiguous(), k_cache.contiguous(), v_cache.contiguous(), cache_seqlens, bool(causal),
                     None if scale is None else float(scale), "" if step is None else str(step))
    return o
