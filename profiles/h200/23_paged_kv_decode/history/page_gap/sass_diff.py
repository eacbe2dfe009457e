#!/usr/bin/env python3
"""Reads what `next.sh time` left (a folder of ID.source.csv and ID.details.txt, ID = step23_ARM_bB_kvK or
step22_bB_kvK) and prints, per shape and arm of step 23, the executed warp instructions of each kernel by opcode
(the SASS mnemonic before its first dot), per warp per tile of keys, step 23's beside step 22's and their
difference, largest first; then the stall samples the same way. A warp's tiles: the block's keys over the tile's (the
grid's x dimension is the split count, the launch's Config<...> ends with the tile's keys), 4 warps a block.

  python3 profiles/h200/23_paged_kv_decode/history/page_gap/sass_diff.py DIR [--keys 65536]
"""
import argparse
import collections
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", ".."))
import fa_profiles as fp  # noqa: E402  (profiles/fa_profiles.py: the source page's parser)


def warp_tiles(details, keys):
    """Warp-tiles of the launch: its grid and block, and the tile's keys (Config<...>'s last), from the details
    page's kernel line."""
    m = re.search(r"Config<[^>]*?(\d+)>.*?(\(\d+, \d+, \d+\))x(\(\d+, 1, 1\))", details)
    if not m:
        return None
    warps, tiles = fp.warps_and_tiles(m.group(2), m.group(3), keys, int(m.group(1)))
    return warps * tiles


def counts(path):
    """{opcode: (executed warp instructions, stall samples)} over the first kernel of a source page."""
    with open(path, encoding="utf-8", errors="replace") as f:
        kernels = fp.parse_source_csv(f.read())
    out = collections.defaultdict(lambda: [0, 0])
    for row in kernels[0][1] if kernels else []:
        op = fp._PRED.sub("", row["Source"].strip()).split(" ")[0].split(".")[0]
        out[op][0] += int(fp.to_float(row.get("Instructions Executed")) or 0)
        out[op][1] += int(fp.to_float(row.get("# Samples")) or 0)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir")
    ap.add_argument("--keys", type=int, default=65536, help="each sequence's keys (sass_counts.sh: 65536)")
    a = ap.parse_args()
    shapes = sorted({f[len("step22_"):-len(".source.csv")] for f in os.listdir(a.dir)
                     if f.startswith("step22_") and f.endswith(".source.csv")})
    for shape in shapes:
        arms = sorted(f[:-len(f"_{shape}.source.csv")] for f in os.listdir(a.dir)
                      if f.startswith("step23_") and f.endswith(f"_{shape}.source.csv"))
        for arm in arms:
            per = {}
            for step in (arm, "step22"):
                with open(os.path.join(a.dir, f"{step}_{shape}.details.txt"), encoding="utf-8") as f:
                    n = warp_tiles(f.read(), a.keys)
                per[step] = (counts(os.path.join(a.dir, f"{step}_{shape}.source.csv")), n)
            (c23, n23), (c22, n22) = per[arm], per["step22"]
            if not n23 or not n22:
                print(f"{shape}: no grid in a details page", file=sys.stderr)
                continue
            for what, i in (("executed warp instructions", 0), ("stall samples", 1)):
                t23, t22 = sum(v[i] for v in c23.values()), sum(v[i] for v in c22.values())
                print(f"\n{shape}, {arm}: {what} per warp per tile ({arm}: {n23} warp-tiles, step 22: {n22})")
                print(f"{'opcode':12} {'23':>9} {'22':>9} {'23 - 22':>9}")
                ops = sorted(set(c23) | set(c22), key=lambda o: -abs(c23[o][i] / n23 - c22[o][i] / n22))
                for op in ops:
                    x, y = c23[op][i] / n23, c22[op][i] / n22
                    if abs(x - y) >= 0.05 or max(x, y) >= 1:
                        print(f"{op:12} {x:9.2f} {y:9.2f} {x - y:+9.2f}")
                print(f"{'total':12} {t23 / n23:9.2f} {t22 / n22:9.2f} {t23 / n23 - t22 / n22:+9.2f}")

if __name__ == "__main__":
    main()
