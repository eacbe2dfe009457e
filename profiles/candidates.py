#!/usr/bin/env python3
"""profiles/candidates.py: step 11's candidate instances side by side, each pinned with
FA_STEP11_CONFIG and timed by the step executable itself (its --bench: CUDA events, warm-up, median
of 20, L2 flushed; step 10 timed interleaved beside it), fp16, FlashAttention-2 benchmark shapes
(batch·seq = 16384, heads = 2048/d), seq 1024 / 4096 / 16384, causal and not.

  python3 profiles/candidates.py [--build build] [--out profiles/<gpu>/step11_candidates.csv]

The candidate names are the executable's own: a pinned name that does not exist is refused with the
list of candidates, which this script reads. Rows: the executable's CSV row plus a `candidate`
column. results.py renders them in docs/11 (block results:step11_candidates).
"""
import argparse
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fa_profiles as fp  # noqa: E402
from bench import run_pinned, write_tagged_csv  # noqa: E402

SEQS = (1024, 4096, 16384)
DIMS = (64, 128)


def candidate_names(exe, d):
    env = dict(os.environ, FA_STEP11_CONFIG="?")
    p = subprocess.run([exe, "--batch", "1", "--heads", "1", "--seq", "64", "--head-dim", str(d), "--check"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    m = re.search(r"\(candidates: ([^)]*)\)", p.stdout)
    if not m:
        raise SystemExit(f"{exe}: could not read the candidates of head_dim {d}:\n{p.stdout}")
    return m.group(1).split()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(fp.ROOT, "build"))
    ap.add_argument("--out", default=os.path.join(fp.gpu_dir(), "step11_candidates.csv"))
    args = ap.parse_args(argv)
    exe = os.path.join(args.build, "bin", "11_tuned_forward")
    rows = []
    for d in DIMS:
        for name in candidate_names(exe, d):
            for causal in (False, True):
                for seq in SEQS:
                    cmd = [exe, "--bench", "--csv", "--dtype", "f16", "--head-dim", str(d), "--seq", str(seq),
                           "--batch", str(16384 // seq), "--heads", str(2048 // d)] + (["--causal"] if causal else [])
                    rows += [dict(r, candidate=name) for r in run_pinned(cmd, "FA_STEP11_CONFIG", name)]
    write_tagged_csv(args.out, "candidate", rows)


if __name__ == "__main__":
    main()
