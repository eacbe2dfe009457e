#!/usr/bin/env python3
"""levels_by_address.py: do SDPA-cuDNN's timing levels (values_or_placement.txt) follow where its tensors lie?
On two decode shapes, 16 draws of randn Q, K and V held at once, each timed by bench.py's median_ms under the cuDNN
backend; per draw, the time and the offsets within a 2 MiB page of Q, K, V and of the output the timed calls
returned (SDPA allocates it, and cuDNN's workspace, from PyTorch's caching allocator on every call); then the same
median again with torch.profiler tracing the GPU (sdpa_kernels.txt: under the profiler the kernels' span showed no
slow level: does the event-timed median under it?). Not yet run: prepared for a device session (about half a
minute). Run from the repository's root."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), *[".."] * 5))
import bench  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402
from torch.profiler import profile, ProfilerActivity  # noqa: E402

PAGE = 2 << 20
flush = bench.flush_buffer(torch)
for b, kvh, n in ((1, 8, 1024), (1, 1, 16384)):
    draws = [(torch.randn(b, 32, 1, 128, device="cuda", dtype=torch.float16),
              torch.randn(b, kvh, n, 128, device="cuda", dtype=torch.float16),
              torch.randn(b, kvh, n, 128, device="cuda", dtype=torch.float16)) for _ in range(16)]
    for i, (q, k, v) in enumerate(draws):
        outs = set()

        def call():
            o = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
            outs.add(o.data_ptr() % PAGE)
            return o

        with torch.no_grad(), sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            ms = bench.median_ms(torch, call, flush, 20, 3)
            with profile(activities=[ProfilerActivity.CUDA]):
                ms_traced = bench.median_ms(torch, call, flush, 20, 3)
        offsets = " ".join(f"{name} {t.data_ptr() % PAGE:#9x}" for name, t in (("q", q), ("k", k), ("v", v)))
        print(f"B{b} KV{kvh} Sk{n} draw {i:2d}: {1e3 * ms:5.1f} us (traced {1e3 * ms_traced:5.1f} us)  {offsets}  "
              f"out {sorted(hex(o) for o in outs)}", flush=True)
    del draws
