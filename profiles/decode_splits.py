#!/usr/bin/env python3
"""profiles/decode_splits.py: step 22's split count against the alternatives. Each decode shape below
is timed by the step executable itself (its --bench: CUDA events, warm-up, median of 20, L2 flushed)
with the split rule's own count (FA_STEP22_SPLITS unset, row "default") and with every count of SPLITS
pinned (FA_STEP22_SPLITS=n).

  python3 profiles/decode_splits.py [--build build] [--out profiles/<gpu>/decode_splits.csv]
  python3 profiles/decode_splits.py --shapes 1:1:131072,1:8:16384 --splits 16,32,64 --out FILE
  python3 profiles/decode_splits.py --shapes 64:1:1024,64:1:4096 --splits 1,2,4 --rows 16,32 --out FILE

--rows also pins a block's rows (FA_STEP22_ROWS; it matters only where a K/V head has more than 16 query
rows, MQA here): every count under each, the `splits` column then "n/rROWS" ("default/r16": the rule's
count for blocks of 16).

Rows: the executable's CSV row plus a `splits` column ("default" or n). results.py renders them in
docs/22 (block results:decode_splits): per shape, GB/s of each count, the fastest in bold, and the
unpinned count's time against the fastest's.

(Step 22's variants against each other on the decode shapes: profiles/knob_ab.py --decode.)
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fa_profiles as fp  # noqa: E402
from bench import decode_flags, pinned, run_pinned, write_tagged_csv  # noqa: E402

SPLITS = (1, 2, 4, 8, 16, 32, 64)
# (batch, K/V heads, keys): caches that fit in L2, where only latency counts (how short may a split
# be?); few blocks and long caches, where splitting must pay; a full grid, where it must not.
SHAPES = ((1, 8, 1024), (8, 1, 4096), (1, 1, 131072), (1, 8, 16384), (1, 32, 65536), (8, 8, 4096), (8, 8, 16384),
          (8, 32, 4096), (64, 8, 4096))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(fp.ROOT, "build"))
    ap.add_argument("--out", default=os.path.join(fp.gpu_dir(), "decode_splits.csv"))
    ap.add_argument("--shapes", help="instead of the shapes below: BATCH:KV_HEADS:KEYS,... (e.g. 1:1:131072)")
    ap.add_argument("--splits", help="instead of the pinned counts below: N,N,...")
    ap.add_argument("--rows", help="also pin a block's rows, each of these (16, 32): R,R")
    args = ap.parse_args(argv)
    shapes = [tuple(int(x) for x in t.split(":")) for t in args.shapes.split(",")] if args.shapes else SHAPES
    splits = tuple(int(n) for n in args.splits.split(",")) if args.splits else SPLITS
    block_rows = tuple(int(r) for r in args.rows.split(",")) if args.rows else (None,)
    if any(r not in (None, 16, 32) for r in block_rows):
        ap.error(f"--rows {args.rows}: a block holds 16 or 32 rows")
    exe = os.path.join(args.build, "bin", "22_split_kv_decode")
    rows = []
    for batch, kv_heads, keys in shapes:
        cmd = [exe, "--bench", "--csv"] + decode_flags(batch, kv_heads, keys)
        for br in block_rows:  # None: the row rule's own choice
            with pinned("FA_STEP22_ROWS", br):
                for n in (None,) + splits:  # None: the heuristic's own count
                    tag = ("default" if n is None else str(n)) + ("" if br is None else f"/r{br}")
                    rows += [dict(r, splits=tag) for r in run_pinned(cmd, "FA_STEP22_SPLITS", n)]
        if rows:  # after every shape, so a run cut short keeps the shapes it finished
            write_tagged_csv(args.out, "splits", rows)


if __name__ == "__main__":
    main()
