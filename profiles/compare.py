#!/usr/bin/env python3
"""profiles/compare.py: two or more steps' Nsight Compute panels side by side, with the change
from each step to the next, from the committed captures only (no GPU needed).

  python3 profiles/compare.py 01 02                      # every shape both steps were captured on
  python3 profiles/compare.py 04 05 06 --shape causal    # only shapes whose flags or label contain 'causal'
  python3 profiles/compare.py 05 06 --markdown           # Markdown (what the docs' compare:NN blocks show)
  python3 profiles/compare.py 04 05 --kernels            # also each step's kernels, one column each

Steps are numbers (5, 05) or names (05_flash_forward, flash_forward). The panels come from
profiles/<gpu>/NN_name/metrics.csv, written by profiles/capture.sh (or, for steps captured before
it existed, from profiles/<gpu>/ncu.csv). A step with several kernels on a shape is one column:
durations, bytes and bank conflicts add up, percentages are weighted by each kernel's duration,
registers and shared memory are the largest, the warp stalls are the top three overall.

Exit status: 0 when every step was found on a common shape, 1 when something is missing (the
output says what and how to capture it), 2 on bad usage.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fa_profiles as fp  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(prog="compare.py", description=__doc__.split("\n\n")[0],
                                 epilog=__doc__.split("\n\n", 1)[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("steps", nargs="+", metavar="STEP", help="two or more steps, in order (e.g. 05 06)")
    ap.add_argument("--shape", help="only shapes whose flags or label contain this text")
    ap.add_argument("--markdown", action="store_true", help="print Markdown tables instead of a terminal table")
    ap.add_argument("--kernels", action="store_true", help="also print each step's kernels, one column each")
    ap.add_argument("--gpu", default=fp.DOC_GPU, help=f"the profiles/<gpu>/ folder to read (default {fp.DOC_GPU})")
    args = ap.parse_args(argv)
    if len(args.steps) < 2:
        ap.error("give at least two steps (e.g. 01 02)")
    if not os.path.isdir(fp.gpu_dir(args.gpu)):
        ap.error(f"no measurements for GPU '{args.gpu}' (no {fp.rel(fp.gpu_dir(args.gpu))}/)")
    try:
        steps = [fp.resolve_step(s, args.gpu) for s in args.steps]
    except SystemExit as e:
        ap.error(str(e))
    text, ok = fp.compare_report(steps, args.gpu, markdown=args.markdown, shape=args.shape, kernels=args.kernels)
    print(text)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
