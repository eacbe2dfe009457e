"""ab_paged.txt -> ab_summary.txt (stdout: per shape and arm, the faster round's µs of step 23 and step 22's time
on the contiguous cache over it) and, with a second argument, a CSV in profiles/knob_ab.py's columns (experiment,
arm, round, problem, time_ms, device; a third argument names the experiment) for results.py's
decode_variants_ab_table. The arms in the order the log
first names them (also ../row_offsets/ab_offs.txt)."""
import collections
import csv
import sys

rows, runs, key = collections.defaultdict(list), [], None
for line in open(sys.argv[1]):
    if line.startswith("# ") and not line.startswith("# round"):
        _, r, v, *shp = line.split()
        key = (v, " ".join(shp), r)
        continue
    if line.startswith("23_paged") and key:
        parts = line.split('",')[1].split(",")  # after the quoted idea: problem, time_ms, ..., prev_time_ms
        t23, t22 = float(parts[1]), float(parts[8])
        rows[key[:2]].append((t23, t22))
        runs.append({"experiment": sys.argv[3] if len(sys.argv) > 3 else "23 gather A/B", "arm": key[0], "round": key[2],
                     "problem": parts[0], "time_ms": parts[1], "device": line.strip().split(",")[-1]})
ARMS = list(dict.fromkeys(k[0] for k in rows))
print(f"{'shape':60s} " + " ".join(f"{v:>14s}" for v in ARMS) + "   (min us of 23 / x contiguous)")
for s in sorted({k[1] for k in rows}):
    cells = []
    for v in ARMS:
        xs = rows.get((v, s), [])
        if not xs:
            cells.append(f"{'-':>14s}")
            continue
        t, c = min(a for a, b in xs) * 1e3, min(b for a, b in xs) * 1e3
        cells.append(f"{t:7.1f} {c / t:5.2f}x")
    print(f"{s:60s} " + " ".join(cells))
if len(sys.argv) > 2:
    with open(sys.argv[2], "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(runs[0]))
        w.writeheader()
        w.writerows(runs)
