#!/usr/bin/env python3
"""values_or_placement.py: does SDPA-cuDNN's timed decode follow the inputs' values, or where the tensors lie?
Q, K and V made in one of four ways: torch.rand (uniform [0, 1)), torch.randn, randn overwritten in place with
uniform values, rand overwritten in place with normal values; each timed by bench.py's median_ms (CUDA events,
L2 flushed, the GPU held busy before each call), then again with Q zeroed (a copy, so one more allocation). The
tensors are freed after each, so the caching allocator hands the next ones blocks that may lie elsewhere.
HOW: the order of the ways in one round (two rounds per shape). Run from the repository's root."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), *[".."] * 5))
import bench  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

HOW = ("randn", "rand", "rand", "randn", "rand_then_normal", "rand")  # the first run: rand, randn, randn_then_uniform, rand_then_normal
flush = bench.flush_buffer(torch)


def make(shape, how):
    t = torch.randn(*shape, device="cuda", dtype=torch.float16) if how.startswith("randn") else \
        torch.rand(*shape, device="cuda", dtype=torch.float16)
    if how == "randn_then_uniform":
        t.uniform_(0, 1)
    if how == "rand_then_normal":
        t.normal_()
    return t


for b, kvh, n in ((1, 8, 1024), (1, 1, 16384)):
    for rnd in range(2):
        for how in HOW:
            q, k, v = make((b, 32, 1, 128), how), make((b, kvh, n, 128), how), make((b, kvh, n, 128), how)
            with torch.no_grad(), sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                m = bench.median_ms(torch, lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True), flush, 20, 3)
                qz = q.clone()
                qz.zero_()
                mz = bench.median_ms(torch, lambda: F.scaled_dot_product_attention(qz, k, v, enable_gqa=True), flush, 20, 3)
            print(f"B{b} KV{kvh} Sk{n} {how:20s} {1e3 * m:.1f} us   (Q zero: {1e3 * mz:.1f} us)", flush=True)
            del q, k, v, qz
