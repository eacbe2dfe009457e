#!/usr/bin/env python3
"""profiles/decode_splits.py: step 22's split count against the alternatives. Each decode shape below
is timed by the step executable itself (its --bench: CUDA events, warm-up, median of 20, L2 flushed)
with the split rule's own count (FA_STEP22_SPLITS unset, row "default") and with every count of SPLITS
pinned (FA_STEP22_SPLITS=n).

  python3 profiles/decode_splits.py [--build build] [--out profiles/<gpu>/decode_splits.csv]
  python3 profiles/decode_splits.py --shapes 1:1:131072,1:8:16384 --splits 32,64,128 --out FILE
  python3 profiles/decode_splits.py --variants one-launch,two-launches,rows32 --kv-heads 1 --rounds 3 --out FILE
  python3 profiles/decode_splits.py --variants one-launch,unpacked --paged 16 --out FILE   # step 23's

Rows: the executable's CSV row plus a `splits` column ("default" or n). results.py renders them in
docs/22 (block results:decode_splits): per shape, GB/s of each count, the fastest in bold, and the
unpinned count's time against the fastest's.

--variants: instead, each shape of the decode sweep (batch 1, 8, 64; --kv-heads of 32, 8, 1; 1k-128k keys)
timed under each named variant with the rule's own split count, the variants interleaved in every round and
their order reversed every other round; rows tagged `variant` and `round`. The summary printed last: per
shape, each variant's median time over the first's.
"""
import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fa_profiles as fp  # noqa: E402
from bench import run_pinned, write_tagged_csv  # noqa: E402

SPLITS = (1, 2, 4, 8, 16, 32, 64)
# (batch, K/V heads, keys): caches that fit in L2, where only latency counts (how short may a split
# be?); few blocks and long caches, where splitting must pay; a full grid, where it must not.
SHAPES = ((1, 8, 1024), (8, 1, 4096), (1, 1, 131072), (1, 8, 16384), (1, 32, 65536), (8, 8, 4096), (8, 8, 16384),
          (8, 32, 4096), (64, 8, 4096))


def shape_cmd(exe, batch, kv_heads, keys):
    return [exe, "--bench", "--csv", "--dtype", "f16", "--batch", str(batch), "--heads", "32", "--kv-heads",
            str(kv_heads), "--seq-q", "1", "--seq-k", str(keys), "--head-dim", "128", "--cache-lens", str(keys)]


def variants_ab(exe, names, kv_heads, rounds, out, extra=()):
    """--variants: every sweep shape with these K/V heads, under each variant, `rounds` interleaved rounds.
    extra: flags every command takes (step 23's --page-size)."""
    shapes = [(b, k, n) for b in (1, 8, 64) for k in kv_heads for n in (1024, 4096, 16384, 65536, 131072)
              if b * k * n * 128 <= 1 << 30]
    rows, times = [], {}
    for r in range(rounds):
        for shape in shapes:
            for v in names if r % 2 == 0 else names[::-1]:
                got = run_pinned(shape_cmd(exe, *shape) + list(extra) + ["--variant", v], "FA_STEP22_SPLITS", None)
                rows += [dict(x, variant=v, round=str(r)) for x in got]
                times.setdefault(shape, {}).setdefault(v, []).append(float(got[0]["time_ms"]))
        write_tagged_csv(out, "variant", rows)  # after every round, so a run cut short keeps what it finished
    print("batch kv_heads keys  " + "  ".join(f"{v}/{names[0]}" for v in names[1:]) + f"  ({names[0]} us)")
    for (b, k, n), t in times.items():
        base = statistics.median(t[names[0]])
        print(f"{b} {k} {n}  " + "  ".join(f"{statistics.median(t[v]) / base:.3f}" for v in names[1:] if v in t) +
              f"  ({base * 1e3:.1f})")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(fp.ROOT, "build"))
    ap.add_argument("--out", default=os.path.join(fp.gpu_dir(), "decode_splits.csv"))
    ap.add_argument("--variants", help="comma-separated variants to time against each other (see above)")
    ap.add_argument("--kv-heads", default="32,8,1", help="--variants: the sweep's K/V heads to run (default all)")
    ap.add_argument("--rounds", type=int, default=3, help="--variants: interleaved rounds (default 3)")
    ap.add_argument("--shapes", help="instead of the shapes below: BATCH:KV_HEADS:KEYS,... (e.g. 1:1:131072)")
    ap.add_argument("--splits", help="instead of the pinned counts below: N,N,...")
    ap.add_argument("--paged", type=int, metavar="PAGE_SIZE",
                    help="--variants: step 23's variants instead, its cache in pages of PAGE_SIZE keys")
    args = ap.parse_args(argv)
    shapes = [tuple(int(x) for x in t.split(":")) for t in args.shapes.split(",")] if args.shapes else SHAPES
    splits = tuple(int(n) for n in args.splits.split(",")) if args.splits else SPLITS
    exe = os.path.join(args.build, "bin", "22_split_kv_decode")
    if args.variants:
        paged = args.paged is not None
        return variants_ab(os.path.join(args.build, "bin", "23_paged_kv_decode") if paged else exe,
                           args.variants.split(","), [int(k) for k in args.kv_heads.split(",")], args.rounds, args.out,
                           ["--page-size", str(args.paged)] if paged else ())
    rows = []
    for batch, kv_heads, keys in shapes:
        cmd = shape_cmd(exe, batch, kv_heads, keys)
        for n in (None,) + splits:  # None: the heuristic's own count
            rows += [dict(r, splits="default" if n is None else str(n))
                     for r in run_pinned(cmd, "FA_STEP22_SPLITS", n)]
        if rows:  # after every shape, so a run cut short keeps the shapes it finished
            write_tagged_csv(args.out, "splits", rows)


if __name__ == "__main__":
    main()
