#!/usr/bin/env python3
"""sdpa_kernels.py: are SDPA-cuDNN's decode kernels slower on uniform inputs than on randn, or only its timing?
On two decode shapes, inputs drawn as bench.py's decode sweep draws them (uniform in [0, 1), or randn), in turn:
bench.py's median_ms of the call (CUDA events, L2 flushed, the GPU held busy before each call), then 20 calls
under torch.profiler with the same flush and hold before each: per call, the span from the start of cuDNN's
attention kernel to the end of its reduction kernel, the gap between them, and the gap from the hold's end to the
first kernel (medians). Run from the repository's root."""
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), *[".."] * 5))
import bench  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402
from torch.profiler import profile, ProfilerActivity  # noqa: E402

flush = bench.flush_buffer(torch)
print("median_ms", flush.numel())
for b, kvh, n in ((1, 8, 1024), (1, 1, 16384)):
    for x in ("uniform", "randn", "uniform", "randn"):
        q = bench.draw_input(torch, (b, 32, 1, 128), torch.float16, x, 0, 1)
        k, v = (bench.draw_input(torch, (b, kvh, n, 128), torch.float16, x, 0, 1) for _ in range(2))
        call = lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True)  # noqa: E731
        with torch.no_grad(), sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            for _ in range(5):
                call()
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as p:
                for i in range(20):
                    flush.fill_(i & 0xFF)
                    torch.cuda._sleep(bench.HOLD_CYCLES)
                    call()
                torch.cuda.synchronize()
            m = bench.median_ms(torch, call, flush, 20, 3)
        print(f"== B{b} KV{kvh} Sk{n} {x}  median_ms {1e3 * m:.1f} us")
        ev = sorted((e for e in p.events() if e.device_type.name == "CUDA"), key=lambda e: e.time_range.start)
        spans, gaps, firsts = [], [], []
        for i, e in enumerate(ev):
            if e.name.startswith("cudnn_generated") and i + 1 < len(ev) and "lean_reduction" in ev[i + 1].name:
                spans.append(ev[i + 1].time_range.end - e.time_range.start)
                gaps.append(ev[i + 1].time_range.start - e.time_range.end)
                firsts.append(e.time_range.start - ev[i - 1].time_range.end)
        print(f"  span cudnn start..lean end {statistics.median(spans):.2f} us, gap between "
              f"{statistics.median(gaps):.2f} us, spin end..cudnn start {statistics.median(firsts):.2f} us (n {len(spans)})")
