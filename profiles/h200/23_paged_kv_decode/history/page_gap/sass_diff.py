#!/usr/bin/env python3
"""Reads what `next.sh time` left (a folder of ID.source.csv and ID.details.txt, ID = step23_ARM_bB_kvK or
step22_bB_kvK) and prints, per shape and arm of step 23, the executed warp instructions of each kernel by opcode
(the SASS mnemonic before its first dot), per warp per tile of keys, step 23's beside step 22's and their
difference, largest first; then the stall samples the same way. A warp's tiles: the block's keys over the tile's (the
grid's x dimension is the split count, the launch's Config<...> ends with the tile's keys), 4 warps a block.

  python3 profiles/h200/23_paged_kv_decode/history/page_gap/sass_diff.py DIR [--keys 65536]
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", ".."))
import fa_profiles as fp  # noqa: E402  (profiles/fa_profiles.py: the source page's counts, the launch's warp-tiles)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir")
    ap.add_argument("--keys", type=int, default=65536, help="each sequence's keys (next.sh: 65536)")
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
                    n = fp.decode_launch_warp_tiles(f.read(), a.keys)
                with open(os.path.join(a.dir, f"{step}_{shape}.source.csv"), encoding="utf-8", errors="replace") as f:
                    per[step] = (fp.source_opcode_counts(f.read()), n)
            (c23, n23), (c22, n22) = per[arm], per["step22"]
            if not n23 or not n22:
                print(f"{shape}: no grid in a details page", file=sys.stderr)
                continue
            for what, i in (("executed warp instructions", 0), ("stall samples", 1)):
                t23, t22 = sum(v[i] for v in c23.values()), sum(v[i] for v in c22.values())
                print(f"\n{shape}, {arm}: {what} per warp per tile ({arm}: {n23} warp-tiles, step 22: {n22})")
                print(f"{'opcode':12} {'23':>9} {'22':>9} {'23 - 22':>9}")
                ops = sorted(set(c23) | set(c22), key=lambda o: (-abs(c23[o][i] / n23 - c22[o][i] / n22), o))
                for op in ops:
                    x, y = c23[op][i] / n23, c22[op][i] / n22
                    if abs(x - y) >= 0.05 or max(x, y) >= 1:
                        print(f"{op:12} {x:9.2f} {y:9.2f} {x - y:+9.2f}")
                print(f"{'total':12} {t23 / n23:9.2f} {t22 / n22:9.2f} {t23 / n23 - t22 / n22:+9.2f}")

if __name__ == "__main__":
    main()
