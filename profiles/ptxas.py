#!/usr/bin/env python3
"""profiles/ptxas.py: every kernel's registers, spills and static shared memory, as ptxas reports them.

    python3 profiles/ptxas.py build [BUILD_DIR]   # configure BUILD_DIR (default build-ptxas) with
                                                 # FA_PTXAS_VERBOSE=ON for sm_90a, build only the steps'
                                                 # *_kernels targets, write profiles/h100/ptxas.csv
    python3 profiles/ptxas.py parse LOG [-o CSV]  # the same from the output of an earlier `ninja -v` build
                                                 # with -DFA_PTXAS_VERBOSE=ON (default: print the CSV)

No GPU is needed: these figures come from the compiler, for the architecture the series is tuned for
(sm_90a), and are filed beside the H100's measurements. profiles/results.py renders them into the
docs as <!-- ptxas:NN:begin --> blocks (step NN's kernels), so no doc types a register count.

CSV columns: step, kernel (demangled, short), registers (per thread), spill_stores and spill_loads
(bytes per thread), stack (bytes of stack frame per thread), static_smem (bytes of __shared__ arrays;
dynamic shared memory is chosen at launch and is not in ptxas's report). The first line is a comment
naming the compiler and architecture. Only the standard library is used.
"""
import csv
import io
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from fa_profiles import demangle_short  # noqa: E402  (the demangler the SASS summary uses too)

CSV = os.path.join(HERE, "h100", "ptxas.csv")
COLUMNS = ["step", "kernel", "registers", "spill_stores", "spill_loads", "stack", "static_smem"]

_UNIT = re.compile(r"-c \S*/steps/(\d\d_[a-z0-9_]+)/kernel\.cu")
_ENTRY = re.compile(r"ptxas info\s*: Compiling entry function '(\S+)' for '(sm_\w+)'")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"ptxas info\s*: Used (\d+) registers(?:, used \d+ barriers)?(?:, \d+ bytes cumulative stack size)?"
                   r"(?:, (\d+) bytes smem)?")


def parse(log):
    """`ninja -v` output with -Xptxas=-v -> (rows, arch). A row per kernel entry of a step's kernel.cu."""
    rows, step, cur, arch = [], None, None, None
    for line in log.splitlines():
        m = _UNIT.search(line)
        if m:
            step = m.group(1)
            continue
        m = _ENTRY.search(line)
        if m:
            cur = {"step": step, "kernel": demangle_short(m.group(1)), "stack": 0, "spill_stores": 0,
                   "spill_loads": 0}
            arch = m.group(2)
            continue
        m = _FRAME.search(line)
        if m and cur is not None:
            cur["stack"], cur["spill_stores"], cur["spill_loads"] = (int(x) for x in m.groups())
            continue
        m = _USED.search(line)
        if m and cur is not None:
            cur["registers"], cur["static_smem"] = int(m.group(1)), int(m.group(2) or 0)
            if cur["step"]:
                rows.append(cur)
            cur = None
    rows.sort(key=lambda r: (r["step"], r["kernel"]))
    return rows, arch


def nvcc_version():
    try:
        out = subprocess.run(["nvcc", "--version"], capture_output=True, text=True).stdout
    except OSError:
        return "nvcc (version unknown)"
    m = re.search(r"release [\d.]+, (V[\d.]+)", out)
    return f"nvcc {m.group(1)}" if m else "nvcc (version unknown)"


def to_csv(rows, arch, compiler):
    out = io.StringIO()
    out.write(f"# ptxas -v, {arch}, {compiler}\n")
    w = csv.DictWriter(out, COLUMNS, lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({c: r[c] for c in COLUMNS})
    return out.getvalue()


def read(path=CSV):
    """(rows, the comment line without '# ') of a committed ptxas.csv; ([], None) if there is none."""
    if not os.path.exists(path):
        return [], None
    with open(path, encoding="utf-8") as f:
        first = f.readline()
        rows = list(csv.DictReader(f))
    return rows, first[2:].strip()


def build(build_dir):
    steps = sorted(d for d in os.listdir(os.path.join(ROOT, "steps")) if re.match(r"\d\d_", d))
    subprocess.run(["cmake", "-S", ROOT, "-B", build_dir, "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release",
                    "-DCMAKE_CUDA_ARCHITECTURES=90a", "-DFA_PTXAS_VERBOSE=ON", "-DFA_BUILD_TESTS=OFF"], check=True)
    # Clean the kernels' objects so that ptxas runs (and reports) again for every step.
    subprocess.run(["ninja", "-C", build_dir, "-t", "clean"] + [f"{s}_kernels" for s in steps], check=True,
                   capture_output=True)
    res = subprocess.run(["ninja", "-C", build_dir, "-v"] + [f"{s}_kernels" for s in steps], capture_output=True,
                         text=True)
    if res.returncode:
        sys.stdout.write(res.stdout + res.stderr)
        raise SystemExit("build failed")
    return res.stdout + res.stderr


def main(argv):
    if len(argv) in (2, 3) and argv[1] == "build":
        log = build(os.path.abspath(argv[2] if len(argv) == 3 else os.path.join(ROOT, "build-ptxas")))
        out = CSV
    elif len(argv) in (3, 5) and argv[1] == "parse" and (len(argv) == 3 or argv[3] == "-o"):
        with open(argv[2], encoding="utf-8", errors="replace") as f:
            log = f.read()
        out = argv[4] if len(argv) == 5 else None
    else:
        print(__doc__)
        return 2
    rows, arch = parse(log)
    if not rows:
        print("no ptxas report found (was the build configured with -DFA_PTXAS_VERBOSE=ON, and run with -v?)",
              file=sys.stderr)
        return 1
    text = to_csv(rows, arch, nvcc_version())
    if out is None:
        sys.stdout.write(text)
        return 0
    with open(out, "w", encoding="utf-8") as f:
        f.write(text)
    print(f"wrote {os.path.relpath(out, ROOT)}: {len(rows)} kernels of {len({r['step'] for r in rows})} steps "
          "(then: python3 profiles/results.py render)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
