#!/usr/bin/env python3
"""profiles/knob_ab.py: does a refinement earn its lines? Time a step's backward (or forward) on the
FlashAttention-2 cells it targets, with the refinement and without it, the arms interleaved in one run.

    python3 profiles/knob_ab.py --experiment "causal head groups" --causal yes \\
        --arm with=build/bin/15_backward_causal_order --arm without=build/bin/15_backward_causal_order:FA_STEP15_GROUP=0 \\
        --out ab.csv

An arm is NAME=EXE[#VARIANT][:VAR=VALUE[,VAR=VALUE...]]: the executable (two builds can be compared), the
step's named variant it runs (--variant; none: its default) and the environment it runs with. Each cell runs `EXE --bench [--bwd] --csv` with the cell's shape flags, once
per arm and round, arm order reversed every other round (so that a drift of the clocks falls on both
arms alike). The CSV holds experiment, arm, round, problem, time_ms, device per run (the --bwd run's
backward row, or the forward row with --fwd), appended to --out; the summary printed last gives, per
cell, the other arms' mean time over the first arm's (above 1: the first arm is faster) and their
median over the cells. The rule it serves (docs/adding_a_step.md, "Budgets"): a refinement stays in a
kernel only with a gain of at least 2% at the median of the cells it targets, measured like this.

--decode: instead of the FA2 cells, the decode sweep's shapes (bench.py: batch 1, 8, 64; 32 query heads over
--kv-heads K/V heads; 1k-128k keys, K and V at most 2^30 elements; fp16, d 128, one query row, every sequence
full), forward only; --page-size N adds that flag (step 23's pages). E.g. step 22's variants:

    python3 profiles/knob_ab.py --experiment rows --decode --kv-heads 1 --rounds 3 --out ab.csv \
        --arm one-launch=build/bin/22_split_kv_decode --arm rows32=build/bin/22_split_kv_decode#rows32

--shape FLAGS (repeatable): instead of either sweep, exactly these shapes, each a string of the step's own
flags (its forward row; its bwd row where the flags hold --bwd), e.g. builds of step 23 on two paged shapes:

    python3 profiles/knob_ab.py --experiment gather --out ab.csv \
        --arm old=.probe/step23_old --arm new=build/bin/23_paged_kv_decode \
        --shape "--batch 64 --heads 32 --kv-heads 1 --seq-q 1 --seq-k 131072 --head-dim 128 --page-size 16" \
        --shape "--batch 1 --heads 32 --kv-heads 8 --seq-q 1 --seq-k 65536 --head-dim 128 --page-size 1"

--shapes FILE: the same from a file, one shape's flags a line (blank lines and lines from # on skipped), for a
set of shapes several experiments time, e.g. profiles/h200/23_paged_kv_decode/history/paged_targets.txt.

The steps run in bench.py's environment (step_env: malloc on huge pages for the host's large inputs).
"""
import argparse
import csv
import os
import re
import shlex
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402  (parse_rows: the executables' CSV)

TOKENS = 16384  # batch · seq of the FA2 cells (docs/conventions.md, "Measurement")


def cells(args):
    for d in args.dims:
        for causal in {"yes": [True], "no": [False], "both": [False, True]}[args.causal]:
            for seq in args.seqs:
                for dtype in args.dtypes:
                    yield d, causal, seq, dtype


def decode_cells(kv_heads, page_size=None):
    """--decode: the decode sweep's shapes with these K/V heads, as cells ("decode", their flags)."""
    for b in bench.DECODE_BATCHES:
        for k in kv_heads:
            for n in bench.DECODE_LENS:
                if b * k * n * bench.DECODE_DIM <= 1 << 30:
                    yield "decode", bench.decode_flags(b, k, n) + (["--page-size", str(page_size)] if page_size else [])


def run_arm(exe, env, cell, fwd, extra=()):
    """The step's forward (fwd) or bwd row of one `EXE --bench --csv` run on the cell (an FA2 cell of cells(), a
    decode cell of decode_cells(): forward only, or a --shape cell ("flags", its flags): bwd where they hold --bwd);
    `extra`: more flags (e.g. an arm's --variant, or profiles/inputs_ab.py's --inputs randn; the row's ' randn'
    suffix is looked past)."""
    if cell[0] == "flags":
        fwd = "--bwd" not in cell[1]
    if cell[0] in ("decode", "flags"):
        cmd = [exe, "--bench", "--csv"] + cell[1]
    else:
        d, causal, seq, dtype = cell
        cmd = [exe, "--bench", "--csv", "--batch", str(TOKENS // seq), "--heads", str(2048 // d), "--seq", str(seq),
               "--head-dim", str(d), "--dtype", dtype] + (["--causal"] if causal else []) + ([] if fwd else ["--bwd"])
    cmd += list(extra)
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**bench.step_env(), **env})
    if p.returncode != 0:
        raise SystemExit(f"knob_ab: {' '.join(cmd)} with {env} exited {p.returncode}: {p.stderr.strip()[-400:]}")
    rows = bench.parse_rows(p.stdout)  # the step's rows (its PREV's time is a column of each)
    name = [bench.fp.split_inputs(r["problem"])[0] for r in rows]
    want = [r for r, n in zip(rows, name) if (not n.endswith((" bwd", " fwd+bwd", " fwd")) if fwd else n.endswith(" bwd"))]
    if not want:
        raise SystemExit(f"knob_ab: no {'forward' if fwd else 'bwd'} row in the output of {' '.join(cmd)}")
    return want[0]


def parse_arm(text):
    """NAME=EXE[#VARIANT][:VAR=VALUE,...] -> (name, exe, env, flags: ["--variant", VARIANT] or [])."""
    name, _, rest = text.partition("=")
    exe, _, env_text = rest.partition(":")
    exe, _, variant = exe.partition("#")
    env = dict(kv.split("=", 1) for kv in env_text.split(",") if kv)
    if not name or not exe:
        raise SystemExit(f"knob_ab: --arm NAME=EXE[#VARIANT][:VAR=VALUE,...], got {text!r}")
    return name, exe, env, ["--variant", variant] if variant else []


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--experiment", required=True)
    ap.add_argument("--arm", action="append", required=True,
                    help="NAME=EXE[#VARIANT][:VAR=VALUE,...]; the first is the reference")
    ap.add_argument("--causal", choices=("yes", "no", "both"), default="both")
    ap.add_argument("--dims", type=int, nargs="+", default=[64, 128])
    ap.add_argument("--seqs", type=int, nargs="+", default=[1024, 2048, 4096, 8192, 16384])
    ap.add_argument("--dtypes", nargs="+", default=["f16", "bf16"])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--fwd", action="store_true", help="time the forward instead of the backward")
    ap.add_argument("--decode", action="store_true", help="the decode sweep's shapes instead (forward only)")
    ap.add_argument("--kv-heads", type=int, nargs="+", default=list(bench.DECODE_KV_HEADS),
                    help="--decode: the K/V heads of its shapes (default 32 8 1)")
    ap.add_argument("--page-size", type=int, help="--decode: a paged cache in pages of this many keys (step 23)")
    ap.add_argument("--shape", action="append", default=[],
                    help="exactly this shape instead of a sweep: the step's flags in one string (repeatable)")
    ap.add_argument("--shapes", metavar="FILE", help="--shape for each line of FILE (# comments, blank lines skipped)")
    ap.add_argument("--out", required=True, help="CSV to append the runs to")
    args = ap.parse_args(argv)
    if args.shapes:
        with open(args.shapes) as f:
            args.shape += [t for t in (line.split("#", 1)[0].strip() for line in f) if t]
        if not args.shape:
            raise SystemExit(f"knob_ab: no shape in {args.shapes}")
    arms = [parse_arm(a) for a in args.arm]
    if len(arms) < 2:
        raise SystemExit("knob_ab: at least two arms")
    new = not os.path.exists(args.out)
    times = {}
    with open(args.out, "a", newline="") as f:
        w = csv.writer(f)
        if new:
            w.writerow(["experiment", "arm", "round", "problem", "time_ms", "device"])
        todo = [("flags", shlex.split(x)) for x in args.shape] if args.shape else \
            decode_cells(args.kv_heads, args.page_size) if args.decode else cells(args)
        for cell in todo:
            for rnd in range(1, args.rounds + 1):
                for name, exe, env, flags in (arms if rnd % 2 else arms[::-1]):
                    r = run_arm(exe, env, cell, args.fwd or args.decode, flags)
                    w.writerow([args.experiment, name, rnd, r["problem"], r["time_ms"], r["device"]])
                    f.flush()
                    # one cell's rows under every arm: the problem without the variant a row names ("[rows32]")
                    cell_name = re.sub(r" \[[\w-]+\]( randn)?$", r"\1", r["problem"])
                    times.setdefault(cell_name, {}).setdefault(name, []).append(float(r["time_ms"]))
    ref = arms[0][0]
    print(f"{args.experiment}: time of each arm over {ref}'s (above 1: {ref} is faster), mean of {args.rounds} rounds")
    ratios = {name: [] for name, _, _, _ in arms[1:]}
    for problem, by_arm in times.items():
        line = [f"{problem:44}", f"{ref} {statistics.fmean(by_arm[ref]):8.3f} ms"]
        for name in ratios:
            ratio = statistics.fmean(by_arm[name]) / statistics.fmean(by_arm[ref])
            ratios[name].append(ratio)
            line.append(f"{name} {ratio:.3f}")
        print("  ".join(line))
    for name, rs in ratios.items():
        print(f"SUMMARY {args.experiment}: {name}/{ref} median {statistics.median(rs):.3f} "
              f"min {min(rs):.3f} max {max(rs):.3f} over {len(rs)} cells")
    return 0


if __name__ == "__main__":
    sys.exit(main())
