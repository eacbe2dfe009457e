#!/usr/bin/env python3
"""decode_inputs_ab.py: does a decode time move with the inputs' distribution, or only with the run? Step 22 and SDPA's
FlashAttention-2 and cuDNN backends on a few decode shapes, each timed on uniform and on randn inputs, the two
interleaved in one process over several rounds (which goes first alternates by round; fresh inputs every time).

    python3 decode_inputs_ab.py --exe build/bin/22_split_kv_decode --rounds 5 --out ab.csv

Shapes: those where the sweeps' ratios to SDPA moved most between the uniform and the randn sweep (one run each).
Step 22: `EXE --bench --csv` with bench.py's decode flags (and `--inputs randn`); SDPA: bench.py's median_ms
(median of --reps, L2 flushed, the GPU held busy before each call), its inputs drawn as bench.py's decode sweep
draws them. CSV: round, who, shape, inputs, time_ms, device (results.py's inputs_ab_table reads it).
"""
import argparse
import csv
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), *[".."] * 5))
import bench  # noqa: E402

SHAPES = ((1, 1, 16384), (1, 1, 65536), (1, 8, 1024), (8, 1, 4096), (64, 1, 1024), (64, 1, 4096))  # batch, K/V heads, keys


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--exe", required=True, help="step 22's executable")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    flush, device = bench.flush_buffer(torch), torch.cuda.get_device_name(0)
    backends = (("sdpa_flash", SDPBackend.FLASH_ATTENTION), ("sdpa_cudnn", SDPBackend.CUDNN_ATTENTION))
    out = open(args.out, "w", newline="")  # written as it goes: a call cut short keeps its rounds so far
    w = csv.DictWriter(out, fieldnames=["round", "who", "shape", "inputs", "time_ms", "device"])
    w.writeheader()
    for r in range(args.rounds):
        for b, kvh, n in SHAPES:
            shape = f"B{b} H{bench.DECODE_HEADS} KV{kvh} Sq1 Sk{n} D{bench.DECODE_DIM}"
            for x in ("uniform", "randn") if r % 2 == 0 else ("randn", "uniform"):
                got, _ = bench.run_csv([args.exe, "--bench", "--csv"] + bench.decode_flags(b, kvh, n) +
                                       (["--inputs", x] if x != "uniform" else []))
                times = {"22": float(got[0]["time_ms"])} if got else {}
                h, d = bench.DECODE_HEADS, bench.DECODE_DIM
                q = bench.draw_input(torch, (b, h, 1, d), torch.float16, x, 0, 1)
                k, v = (bench.draw_input(torch, (b, kvh, n, d), torch.float16, x, 0, 1) for _ in range(2))
                for who, backend in backends:
                    with torch.no_grad(), sdpa_kernel(backend):
                        times[who] = bench.median_ms(torch, lambda: F.scaled_dot_product_attention(
                            q, k, v, enable_gqa=True), flush, args.reps, 3)
                del q, k, v
                w.writerows(dict(round=r, who=who, shape=shape, inputs=x, time_ms=f"{t:.6g}", device=device)
                            for who, t in times.items())
                out.flush()
                print(f"round {r} {shape} {x}: " + ", ".join(f"{who} {1e3 * t:.1f} us" for who, t in times.items()),
                      flush=True)
    out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
