#!/usr/bin/env python3
"""profiles/fa_profiles.py: what capture.sh, compare.py, bench.py and results.py share.

Python 3 standard library only. As a module it gives the committed measurements' layout, the
Nsight Compute metric panel (which ncu metrics, how they become the columns of metrics.csv, how
a step's kernels add up), the side-by-side comparison of steps, and the small formatting helpers.
As a script it serves profiles/capture.sh:

  python3 profiles/fa_profiles.py slug "NVIDIA H100 80GB HBM3"   # -> h100 (the profiles/<gpu>/ folder)
  python3 profiles/fa_profiles.py ncu-metrics                    # the --metrics list capture.sh asks ncu for
  python3 profiles/fa_profiles.py shapes 05_flash_forward        # that step's lines of ncu_shapes.txt
  python3 profiles/fa_profiles.py kernels STEP "FLAGS"           # that line's kernel-name regex ('' = all)
  python3 profiles/fa_profiles.py source STEP "FLAGS"            # 1 if that line asks for source counters, else 0
  python3 profiles/fa_profiles.py source-stalls WORK_DIR OUT_DIR
        # WORK_DIR: NNN.flags, NNN.source.csv (ncu --page source --print-source sass --csv) and sass.txt
        # (cuobjdump -sass of the executable). Writes OUT_DIR/source_stalls.csv.
  python3 profiles/fa_profiles.py panel WORK_DIR OUT_DIR [--ncu-version V]
        # WORK_DIR: one capture of one step, files NNN.flags, NNN.raw.csv (ncu --page raw --csv) and
        # NNN.sol.txt (ncu --page details --section SpeedOfLight), NNN = 000, 001, ... in shape order.
        # Writes OUT_DIR/metrics.csv, OUT_DIR/speed_of_light.txt and OUT_DIR/ncu_raw.csv.
"""
import csv
import io
import math
import os
import re
import sys
import collections
from collections import OrderedDict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROFILES = os.path.join(ROOT, "profiles")
DOC_GPU = "h100"  # the GPU whose committed results the docs quote
SHAPES_FILE = os.path.join(PROFILES, "ncu_shapes.txt")
MOVED_FILE = os.path.join(PROFILES, "moved.txt")

# The executables' --csv header (harness/runner.cpp, print_rows); bench.csv keeps it for every row.
BENCH_COLUMNS = ["step", "idea", "problem", "time_ms", "rate", "unit", "pct_peak", "peak", "peak_value",
                 "prev_step", "prev_time_ms", "speedup_vs_prev", "err_vs_prev", "check", "baseline",
                 "baseline_time_ms", "vs_baseline", "device"]


# ---- files -------------------------------------------------------------------------------------
def gpu_dir(gpu=DOC_GPU):
    return os.path.join(PROFILES, gpu)


def rel(path):
    return os.path.relpath(path, ROOT)


def read_csv(path):
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def read_env(gpu=DOC_GPU):
    path = os.path.join(gpu_dir(gpu), "env.txt")
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        return [line.strip() for line in f if line.strip()]


def read_bench(gpu=DOC_GPU):
    path = os.path.join(gpu_dir(gpu), "bench.csv")
    return read_csv(path) if os.path.exists(path) else []


def gpu_slug(name):
    """'NVIDIA H100 80GB HBM3' -> 'h100': the short model name for known parts, else the name
    lower-cased with every run of other characters turned into '_'."""
    n = name.lower()
    m = re.search(r"\b(gh200|gb200|[abhl]\d{2,3}[a-z]?|l40s?|rtx ?a?\d{4}( ?ti)?)\b", n)
    if m:
        return m.group(1).replace(" ", "")
    slug = re.sub(r"[^a-z0-9]+", "_", n).strip("_")
    return re.sub(r"^nvidia_", "", slug) or "gpu"


# ---- steps, shapes and the counter each step moves ------------------------------------------------
def _lines(path):
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        return [l.strip() for l in f if l.strip() and not l.lstrip().startswith("#")]


def norm_flags(flags):
    return " ".join(flags.split())


def _shape_line(line):
    """'<step> [kernels=REGEX] [source] <flags>' -> (step, flags, regex or '', source: bool)."""
    step, _, rest = line.partition(" ")
    regex, source = "", False
    while True:
        rest = rest.strip()
        word, _, tail = rest.partition(" ")
        if word.startswith("kernels="):
            regex, rest = word[len("kernels="):], tail
        elif word == "source":
            source, rest = True, tail
        else:
            break
    return step, norm_flags(rest), regex, source


def read_shapes(path=SHAPES_FILE):
    """ncu_shapes.txt -> [(step, flags)] in file order."""
    return [(step, flags) for step, flags, _, _ in map(_shape_line, _lines(path))]


def kernel_filter(step, flags, path=SHAPES_FILE):
    """The kernel-name regex of a line of ncu_shapes.txt ('kernels=step09::'), or '' (every kernel)."""
    flags = norm_flags(flags)
    return next((r for s, f, r, _ in map(_shape_line, _lines(path)) if s == step and f == flags), "")


def wants_source(step, flags, path=SHAPES_FILE):
    """Whether a line of ncu_shapes.txt asks for per-instruction stall samples ('source')."""
    flags = norm_flags(flags)
    return any(src for s, f, _, src in map(_shape_line, _lines(path)) if s == step and f == flags)


def read_moved(path=MOVED_FILE):
    """moved.txt -> [{step, prev, shape, prev_shape, counter, problem}] ('-' fields become '').
    The shape field is the flags both steps were captured with, or 'PREV_FLAGS => FLAGS' where the
    previous step runs another problem (an fp32 step before an fp16 one: the same shape without --dtype)."""
    out = []
    for line in _lines(path):
        parts = [p.strip() for p in line.split("|")]
        if len(parts) != 5:
            raise SystemExit(f"{rel(path)}: expected 5 '|'-separated fields, got: {line}")
        step, prev, shape, counter, problem = [("" if p == "-" else p) for p in parts]
        if counter and counter not in COUNTERS:
            raise SystemExit(f"{rel(path)}: unknown counter '{counter}' (one of: {', '.join(COUNTERS)})")
        prev_shape, _, own = shape.rpartition("=>")
        shape = norm_flags(own)
        out.append(dict(step=step, prev=prev, shape=shape, prev_shape=norm_flags(prev_shape) or shape,
                        counter=counter, problem=problem))
    return out


def known_steps(gpu=DOC_GPU):
    names = {s for s, _ in read_shapes()} | {m["step"] for m in read_moved()}
    if os.path.isdir(gpu_dir(gpu)):
        names |= {d for d in os.listdir(gpu_dir(gpu)) if re.match(r"\d\d_", d)}
    names |= {r["step"] for r in read_bench(gpu) if re.match(r"\d\d_", r["step"])}
    names |= {r["step"] for r in legacy_rows(gpu)}
    return sorted(names)


def resolve_step(arg, gpu=DOC_GPU):
    """'5', '05', '05_flash_forward' or 'flash_forward' -> '05_flash_forward'."""
    names = known_steps(gpu)
    a = arg.strip()
    if re.fullmatch(r"\d{1,2}", a):
        hits = [n for n in names if n[:2] == f"{int(a):02d}"]
    else:
        hits = [n for n in names if n == a or n[3:] == a]
    if len(hits) == 1:
        return hits[0]
    raise SystemExit(f"unknown step '{arg}' (known: {', '.join(n[:2] for n in names)})")


def parse_flags(flags):
    toks, out, i = flags.split(), {}, 0
    while i < len(toks):
        t = toks[i]
        if t.startswith("--") and i + 1 < len(toks) and not toks[i + 1].startswith("--"):
            out[t[2:]] = toks[i + 1]
            i += 2
        else:
            out[t.lstrip("-")] = True
            i += 1
    return out


def shape_label(flags):
    """A shape's flags as the executables describe the problem: '--rows 64 --cols 4194304' ->
    '64x4194304', '--batch 4 --heads 32 --seq 4096 --head-dim 64 --causal' -> 'B4 H32 S4096 D64 causal'."""
    f = parse_flags(flags)
    if "rows" in f and "cols" in f:
        return f"{f['rows']}x{f['cols']}"
    if "size" in f or "m" in f:
        m, n, k = (f.get(x, f.get("size", "?")) for x in ("m", "n", "k"))
        label = f"{m}x{n}x{k} {str(f.get('layout', 'nt')).upper()}"
        return label + (f" x{f['batch']}" if "batch" in f else "")
    if "head-dim" in f or "seq" in f:
        seq = f"S{f['seq']}" if "seq" in f else f"Sq{f.get('seq-q', '?')} Sk{f.get('seq-k', '?')}"
        kv = f" KV{f['kv-heads']}" if "kv-heads" in f and f["kv-heads"] != f.get("heads") else ""
        label = f"B{f.get('batch', '?')} H{f.get('heads', '?')}{kv} {seq} D{f.get('head-dim', '?')}"
        label += " cache" if "cache-lens" in f else ""
        label += " causal" if f.get("causal") else ""
        label += f" {f['dtype']}" if "dtype" in f else ""
        return label + (" bwd" if f.get("bwd") else "")
    return flags.replace("--", "").strip()


_ATTN = re.compile(r"^B(\d+) H(\d+)(?: KV(\d+))? (?:S(\d+)|Sq(\d+) Sk(\d+)) D(\d+)( cache)?( causal)? (f32|f16|bf16)"
                   r"(?: (fwd|bwd|fwd\+bwd))?$")


def split_problem(problem, gqa=False, cache=False):
    """An attention problem of bench.csv -> dict(shape, batch, heads, kv_heads, seq, seq_k, d, cache, causal, dtype,
    mode), or None. 'B8 H32 S2048 D64 causal f16 bwd' -> shape 'B8 H32 S2048 D64 causal', mode 'bwd'; no mode =
    fwd. A grouped-query problem ('B8 H32 KV8 S2048 ...') only with `gqa`, a KV cache ('... D128 cache f16', step
    22) only with `cache` (else None: the tables of the other steps skip them); kv_heads is the heads for MHA."""
    m = _ATTN.match(problem.strip())
    if not m or (m.group(3) and not gqa) or (m.group(8) and not cache):
        return None
    b, h, kv, s, sq, sk, d, kv_cache, causal, dtype, mode = m.groups()
    shape = problem.strip().rsplit(" " + dtype, 1)[0]
    return dict(shape=shape, batch=int(b), heads=int(h), kv_heads=int(kv or h), seq=int(s or sq), seq_k=int(s or sk),
                d=int(d), cache=bool(kv_cache), causal=bool(causal), dtype=dtype, mode=mode or "fwd")


# How a row's random inputs were drawn (the executables' --inputs, bench.py --inputs): a problem measured on
# standard normal inputs ends in " randn" (after its mode and its " [variant]"); a uniform one has no suffix, so
# the committed rows keep their names, and split_problem() (anchored) never takes a randn row for a uniform one.
INPUTS = ("uniform", "randn")


def split_inputs(problem):
    """'B8 H32 S2048 D64 f16 bwd randn' -> ('B8 H32 S2048 D64 f16 bwd', 'randn'); no suffix -> (problem, 'uniform')."""
    p = problem.strip()
    return (p[:-len(" randn")], "randn") if p.endswith(" randn") else (p, "uniform")


def on_inputs(problem, inputs):
    """The problem without its inputs' suffix where it was measured on `inputs` (uniform or randn), else None."""
    p, drawn = split_inputs(problem)
    return p if drawn == inputs else None


def with_inputs(problem, inputs):
    """The problem's name for rows measured on `inputs` (the inverse of split_inputs)."""
    if inputs not in INPUTS:
        raise ValueError(f"inputs {inputs!r}: one of {', '.join(INPUTS)}")
    return problem + " randn" if inputs == "randn" else problem


# ---- numbers and units ---------------------------------------------------------------------------
def to_float(text):
    """'1,101,604,352' -> 1101604352.0; '', 'n/a', '-1' stay distinguishable: None for non-numbers."""
    if text is None:
        return None
    t = str(text).strip().replace(",", "")
    try:
        return float(t)
    except ValueError:
        return None


_TIME = {"nsecond": 1e-9, "ns": 1e-9, "usecond": 1e-6, "us": 1e-6, "µs": 1e-6, "msecond": 1e-3, "ms": 1e-3,
         "second": 1.0, "s": 1.0}
_PREFIX = {"": 1.0, "K": 1e3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "Ki": 1024.0, "Mi": 1024.0 ** 2,
           "Gi": 1024.0 ** 3, "Ti": 1024.0 ** 4}


def to_base(value, unit):
    """(value, ncu unit) -> value in seconds for times, bytes for sizes; other units unchanged."""
    u = (unit or "").strip()
    if u in _TIME:
        return value * _TIME[u]
    m = re.fullmatch(r"(K|k|M|G|T|Ki|Mi|Gi|Ti)?(byte|B)", u)
    if m:
        return value * _PREFIX[m.group(1) or ""]
    return value


# ---- the metric panel ----------------------------------------------------------------------------
class Counter:
    """One row of the panel: a column of metrics.csv, its label, how a step's kernels combine
    ('sum', 'max', or 'time': weighted by each kernel's duration), and its kind of number."""

    def __init__(self, key, label, agg, kind):
        self.key, self.label, self.agg, self.kind = key, label, agg, kind


PANEL = [
    Counter("time_us", "duration (µs)", "sum", "time"),
    Counter("dram_read_mb", "DRAM read (MB)", "sum", "size"),
    Counter("dram_write_mb", "DRAM write (MB)", "sum", "size"),
    Counter("dram_pct", "DRAM throughput (% of peak)", "time", "pct"),
    Counter("sm_pct", "SM throughput (% of peak)", "time", "pct"),
    Counter("occupancy_pct", "achieved occupancy (%)", "time", "pct"),
    Counter("regs", "registers / thread", "max", "int"),
    Counter("smem_kb", "shared memory / block (KB, static + dynamic)", "max", "kb"),
    Counter("tensor_pct", "tensor pipe (% of peak, active)", "time", "pct"),
    Counter("fma_pct", "FMA pipe (% of peak, active)", "time", "pct"),
    Counter("bank_ld", "shared-memory load bank conflicts", "sum", "count"),
    Counter("bank_st", "shared-memory store bank conflicts", "sum", "count"),
    Counter("bank_ldsm", "ldmatrix (LDSM) bank conflicts", "sum", "count"),
    Counter("bank_ldgsts", "cp.async (LDGSTS) shared-store bank conflicts", "sum", "count"),
    Counter("inst", "warp instructions executed", "sum", "count"),
    Counter("smem_ld_inst", "shared-memory load instructions (warp)", "sum", "count"),
    Counter("smem_ld_wf", "shared-memory load wavefronts (cycles of the 128 B/cycle pipe)", "sum", "count"),
    Counter("smem_pipe_pct", "shared-memory pipe (% of peak, wavefronts)", "time", "pct"),
    Counter("l2_hit_pct", "L2 hit rate (%)", "time", "pct"),
    Counter("l1_hit_pct", "L1 hit rate (%)", "time", "pct"),
]
COUNTERS = OrderedDict((c.key, c) for c in PANEL)
# Counters added to the panel after the first captures (for the tensor-core steps): side-by-side tables
# leave them out where none of the steps has them, instead of a row of '-'.
LATER_COUNTERS = {"bank_ldsm", "bank_ldgsts", "inst", "smem_ld_inst", "smem_ld_wf", "smem_pipe_pct"}

# metrics.csv column <- ncu metrics (the first one ncu reported wins; 'max' takes the largest).
# Names from the Nsight Compute metrics reference for GH100 (2025.x). A name this ncu does not
# know is dropped by capture.sh and its column stays empty.
PANEL_METRICS = OrderedDict([
    ("time_us", (["gpu__time_duration.sum"], "first")),
    ("dram_read_mb", (["dram__bytes_read.sum"], "first")),
    ("dram_write_mb", (["dram__bytes_write.sum"], "first")),
    ("dram_pct", (["dram__throughput.avg.pct_of_peak_sustained_elapsed",
                   "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed"], "first")),
    ("sm_pct", (["sm__throughput.avg.pct_of_peak_sustained_elapsed"], "first")),
    ("occupancy_pct", (["sm__warps_active.avg.pct_of_peak_sustained_active"], "first")),
    ("regs", (["launch__registers_per_thread"], "first")),
    ("smem_static_kb", (["launch__shared_mem_per_block_static"], "first")),
    ("smem_dynamic_kb", (["launch__shared_mem_per_block_dynamic"], "first")),
    # mma.sync (HMMA) on sm_80/sm_90, wgmma (GMMA) on sm_90a; the generic tensor pipe where it exists.
    ("tensor_pct", (["sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active",
                     "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
                     "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active"], "max")),
    ("fma_pct", (["sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active"], "first")),
    ("bank_ld", (["l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum"], "first")),
    ("bank_st", (["l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum"], "first")),
    # Per SASS opcode: ldmatrix (LDSM) reads and cp.async (LDGSTS) writes into shared memory, the two
    # shared-memory paths of the tensor-core steps (09+). bank_st above includes the LDGSTS writes.
    ("bank_ldsm", (["sm__sass_l1tex_data_bank_conflicts_pipe_lsu_mem_shared_op_ldsm.sum",
                    "smsp__sass_l1tex_data_bank_conflicts_pipe_lsu_mem_shared_op_ldsm.sum"], "first")),
    ("bank_ldgsts", (["sm__sass_l1tex_data_bank_conflicts_pipe_lsu_mem_shared_op_ldgsts.sum",
                      "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ldgsts.sum"], "first")),
    ("inst", (["smsp__inst_executed.sum"], "first")),
    # Shared-memory loads: instructions, and the wavefronts (cycles) they took. An LDS.128 is at least
    # 4 wavefronts (one 32-bit register to each of 32 lanes per cycle), 2 where lanes pair up.
    ("smem_ld_inst", (["smsp__inst_executed_op_shared_ld.sum"], "first")),
    ("smem_ld_wf", (["l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum"], "first")),
    ("smem_pipe_pct", (["l1tex__data_pipe_lsu_wavefronts_mem_shared.avg.pct_of_peak_sustained_elapsed"], "first")),
    ("l2_hit_pct", (["lts__t_sector_hit_rate.pct"], "first")),
    ("l1_hit_pct", (["l1tex__t_sector_hit_rate.pct"], "first")),
])
# Warp-stall reasons, in warp cycles per issued instruction (the WarpStateStats section's numbers).
STALL_REASONS = ["barrier", "branch_resolving", "dispatch_stall", "drain", "imc_miss", "lg_throttle",
                 "long_scoreboard", "math_pipe_throttle", "membar", "mio_throttle", "misc", "no_instruction",
                 "not_selected", "selected", "short_scoreboard", "sleeping", "tex_throttle", "wait"]
STALL_METRIC = "smsp__average_warps_issue_stalled_{}_per_issue_active.ratio"
_STALL_RE = re.compile(r"^smsp__average_warps_issue_stalled_(\w+?)_per_issue_active\.ratio$")

METRICS_COLUMNS = ["step", "shape", "problem", "id", "kernel", "grid", "block", "time_us", "dram_read_mb",
                   "dram_write_mb", "dram_pct", "sm_pct", "occupancy_pct", "regs", "smem_static_kb",
                   "smem_dynamic_kb", "tensor_pct", "fma_pct", "bank_ld", "bank_st", "bank_ldsm", "bank_ldgsts",
                   "inst", "smem_ld_inst", "smem_ld_wf", "smem_pipe_pct", "l2_hit_pct", "l1_hit_pct",
                   "stall1", "stall1_cpi", "stall2", "stall2_cpi", "stall3", "stall3_cpi", "stall_total_cpi"]
NCU_SECTIONS = ["SpeedOfLight", "LaunchStats", "Occupancy", "WarpStateStats"]


def ncu_metric_list():
    names = []
    for metrics, _ in PANEL_METRICS.values():
        names += metrics
    return names + [STALL_METRIC.format(r) for r in STALL_REASONS]


def short_kernel(name):
    """'void step03::sgemm<1, 4, 4, step03::Tile<128, 128, 256, 2>>(const float *, ...)' ->
    'sgemm<1, 4, 4, Tile<128, 128, 256, 2>>'."""
    n = re.sub(r"^void\s+", "", name.strip())
    if n.endswith(")"):  # drop the parameter list: the last balanced (...)
        depth = 0
        for i in range(len(n) - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(n[i], 0)
            if depth == 0:
                n = n[:i]
                break
    n = n.replace("(int)", "")  # ncu's source page spells template arguments 'backward_dq<(int)128>'
    return re.sub(r"\b(step\d\d|fa)::", "", n).strip()


def _convert(column, value, unit):
    base = to_base(value, unit)
    if column == "time_us":
        return base * 1e6 if unit.strip() in _TIME else value * 1e-3  # no unit: ncu's default is ns
    if column.endswith("_mb"):
        return base * 1e-6 if unit.strip() else value * 1e-6
    if column.endswith("_kb"):
        return base * 1e-3 if unit.strip() else value * 1e-3
    return value


def parse_raw_csv(text):
    """ncu --page raw --csv (one header row, one units row, one row per profiled kernel) ->
    [{kernel, grid, block, metrics: {name: (value or None, unit)}}]."""
    lines = text.splitlines()
    start = next((i for i, l in enumerate(lines) if l.startswith('"ID"') or l.startswith("ID,")), None)
    if start is None:
        return []
    rows = list(csv.reader(lines[start:]))
    header, body = rows[0], rows[1:]
    units = [""] * len(header)
    if body and (not body[0] or not body[0][0].strip().isdigit()):  # the units row has no ID
        units, body = body[0] + [""] * (len(header) - len(body[0])), body[1:]
    col = {h: i for i, h in enumerate(header)}
    out = []
    for r in body:
        if not r or not r[0].strip().isdigit():
            continue
        r = r + [""] * (len(header) - len(r))
        metrics = {h: (to_float(r[i]), units[i]) for i, h in enumerate(header) if "__" in h}
        get = lambda k: r[col[k]] if k in col else ""
        out.append(dict(id=int(get("ID")), kernel=get("Kernel Name"), grid=get("Grid Size"),
                        block=get("Block Size"), metrics=metrics))
    return out


def warps_and_tiles(grid, block, keys, bn):
    """A split-KV decode launch's warps (grid "(x, y, z)", block "(threads, 1, 1)", 32 threads a warp) and each
    block's tiles of bn keys, the block's keys being keys over the grid's x (the split count)."""
    gx, gy, gz = (int(v) for v in re.findall(r"\d+", grid))
    threads = int(re.findall(r"\d+", block)[0])
    return gx * gy * gz * threads // 32, math.ceil(math.ceil(keys / gx) / bn)


def decode_launch_warp_tiles(details, keys):
    """Warp-tiles of a split-KV decode launch (its warps times each block's tiles, warps_and_tiles) read from the
    kernel line of its ncu details page: the grid and block, and the tile's keys (the last argument of Config<...>).
    None where the page has no such line."""
    m = re.search(r"Config<[^>]*?(\d+)>.*?(\(\d+, \d+, \d+\))x(\(\d+, 1, 1\))", details)
    if not m:
        return None
    warps, tiles = warps_and_tiles(m.group(2), m.group(3), keys, int(m.group(1)))
    return warps * tiles


def _dims(text):
    return "x".join(re.findall(r"\d+", text or "")) or ""


def panel_row(step, flags, rec):
    """One profiled kernel (parse_raw_csv) -> one metrics.csv row: the panel and the top three stalls."""
    m = rec["metrics"]
    row = OrderedDict((c, "") for c in METRICS_COLUMNS)
    row.update(step=step, shape=flags, problem=shape_label(flags), id=rec["id"], kernel=short_kernel(rec["kernel"]),
               grid=_dims(rec["grid"]), block=_dims(rec["block"]))
    for column, (names, how) in PANEL_METRICS.items():
        values = [_convert(column, m[n][0], m[n][1]) for n in names if n in m and m[n][0] is not None]
        if values:
            row[column] = max(values) if how == "max" else values[0]
    stalls = {}
    for name, (value, _) in m.items():
        s = _STALL_RE.match(name)
        if s and value is not None and not s.group(1).endswith("_not_issued"):
            stalls[s.group(1)] = value
    if stalls:
        row["stall_total_cpi"] = math.fsum(stalls.values())
        top = sorted(((v, k) for k, v in stalls.items() if k != "selected"), reverse=True)[:3]
        for i, (v, k) in enumerate(top, 1):
            row[f"stall{i}"], row[f"stall{i}_cpi"] = k, v
    return row


def _fmt_cell(v):
    if isinstance(v, float):
        return f"{v:.10g}"
    return str(v)


def write_metrics(path, rows):
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(METRICS_COLUMNS)
        for r in rows:
            w.writerow([_fmt_cell(r.get(c, "")) for c in METRICS_COLUMNS])


def build_step_capture(work, out, ncu_version=""):
    """capture.sh's last stage for one step: WORK_DIR/NNN.{flags,raw.csv,sol.txt} -> OUT_DIR files."""
    step = os.path.basename(os.path.normpath(out))
    ids = sorted({f.split(".")[0] for f in os.listdir(work) if f.endswith(".flags")})
    rows, raw, sol = [], [], []
    for i in ids:
        with open(os.path.join(work, i + ".flags"), encoding="utf-8") as f:
            flags = norm_flags(f.read())
        text = ""
        if os.path.exists(os.path.join(work, i + ".raw.csv")):
            with open(os.path.join(work, i + ".raw.csv"), encoding="utf-8", errors="replace") as f:
                text = f.read()
        recs = parse_raw_csv(text)
        if not recs:
            print(f"  {step} {flags}: no kernel in ncu's raw export (nothing recorded)", file=sys.stderr)
            continue
        rows += [panel_row(step, flags, r) for r in recs]
        raw.append(f"# {step} {flags}\n" + "\n".join(l for l in text.splitlines() if not l.startswith("==")))
        sol_path = os.path.join(work, i + ".sol.txt")
        if os.path.exists(sol_path):
            with open(sol_path, encoding="utf-8", errors="replace") as f:
                body = "\n".join(l.rstrip() for l in f.read().splitlines() if not l.startswith("==PROF=="))
            sol.append(f"## {shape_label(flags)}   ({step} --profile {flags})\n\n{body.strip()}\n")
    if not rows:
        return 1
    os.makedirs(out, exist_ok=True)
    write_metrics(os.path.join(out, "metrics.csv"), rows)
    with open(os.path.join(out, "ncu_raw.csv"), "w", encoding="utf-8") as f:
        f.write("\n".join(raw) + "\n")
    with open(os.path.join(out, "speed_of_light.txt"), "w", encoding="utf-8") as f:
        f.write(f"# {step}: Nsight Compute SpeedOfLight section, one launch per shape after a warm-up\n"
                f"# (ncu --clock-control none --profile-from-start off; {ncu_version or 'ncu version unknown'}).\n"
                f"# Written by profiles/capture.sh; durations compare only with other ncu durations.\n\n")
        f.write("\n".join(sol))
    print(f"  wrote {rel(out)}/metrics.csv ({len(rows)} rows: one per shape and kernel), speed_of_light.txt, ncu_raw.csv")
    return 0


# ---- per-instruction stall samples (capture.sh, lines marked 'source') -----------------------------
# ncu's SourceCounters section samples every warp's state at intervals and charges the sample to the
# instruction the warp is about to issue. capture.sh exports those samples per SASS instruction
# (ncu --page source --print-source sass --csv) and the executable's SASS (cuobjdump -sass, which
# keeps the .reuse flags that ncu's listing drops); source_stalls() adds them up per group of
# instructions into source_stalls.csv. The FFMA groups: an FFMA reads its register operands from the
# register file's banks unless the previous instruction kept the same register in the same operand
# slot with .reuse (the operand reuse cache). "Two reads of one parity": two of the registers it
# does read are both even or both odd numbered (R100 and R124, say).
SOURCE_STALLS = ["selected", "not_selected", "dispatch", "short_sb", "long_sb", "wait", "barrier", "mio"]
SOURCE_COLUMNS = ["step", "shape", "kernel", "group", "inst", "samples"] + SOURCE_STALLS + ["other"]
SOURCE_GROUPS = ["FFMA, two reads of one parity", "FFMA, other", "LDS", "other"]
_SASS_LINE = re.compile(r"^\s*/\*[0-9a-f]{4,}\*/\s+(.*?)\s*;")
_PRED = re.compile(r"^@!?U?P[T\d]+\s+")
_REG = re.compile(r"^-?\|?R(\d+)(\.reuse)?\|?$")


def parse_cuobjdump(text):
    """cuobjdump -sass output -> {function (mangled) name: [instruction text, .reuse flags kept]}."""
    funcs, name = {}, None
    for line in text.splitlines():
        m = re.search(r"Function\s*:\s*(\S+)", line)
        if m:
            name = m.group(1)
            funcs[name] = []
            continue
        m = _SASS_LINE.match(line)
        if m and name is not None:
            funcs[name].append(m.group(1))
    return funcs


def parse_source_csv(text):
    """ncu --page source --print-source sass --csv -> [(kernel name, [row dict per instruction])]."""
    out, lines = [], text.splitlines()
    starts = [i for i, l in enumerate(lines) if l.startswith('"Kernel Name"')]
    for k, i in enumerate(starts):
        head = next(csv.reader([lines[i]]))
        body = lines[i + 1:starts[k + 1] if k + 1 < len(starts) else len(lines)]
        rows = list(csv.DictReader(io.StringIO("\n".join(l for l in body if not l.startswith("==")))))
        out.append((head[1] if len(head) > 1 else "", [r for r in rows if r.get("Source") is not None]))
    return out


def source_opcode_counts(text):
    """{opcode: [executed warp instructions, stall samples]} over the first kernel of an ncu source page (--page
    source --print-source sass --csv); the opcode: the SASS mnemonic, predicate dropped, before its first dot."""
    kernels = parse_source_csv(text)
    out = collections.defaultdict(lambda: [0, 0])
    for row in kernels[0][1] if kernels else []:
        op = _PRED.sub("", row["Source"].strip()).split(" ")[0].split(".")[0]
        out[op][0] += int(to_float(row.get("Instructions Executed")) or 0)
        out[op][1] += int(to_float(row.get("# Samples")) or 0)
    return out


def _norm_sass(text):
    return " ".join(_PRED.sub("", text.replace(".reuse", "")).split()).rstrip(" ;")


def match_function(rows, funcs):
    """The cuobjdump function whose instructions are ncu's rows (same count, >= 90% the same text)."""
    mine = [_norm_sass(r["Source"]) for r in rows]
    best, score = None, 0.0
    for name, ins in funcs.items():
        if len(ins) != len(mine):
            continue
        same = sum(a == _norm_sass(b) for a, b in zip(mine, ins)) / max(1, len(ins))
        if same > score:
            best, score = name, same
    return best if score >= 0.9 else None


def instruction_group(ins, cached):
    """(group, the registers this instruction keeps in the reuse cache: {operand slot: register})."""
    body = _PRED.sub("", ins.strip())
    op, _, rest = body.partition(" ")
    srcs = [t.strip() for t in rest.split(",")][1:] if rest else []
    keep, reads = {}, []
    for slot, t in enumerate(srcs):
        m = _REG.match(t)
        if not m:
            continue
        reg = int(m.group(1))
        if m.group(2):
            keep[slot] = reg
        if cached.get(slot) != reg:
            reads.append(reg)
    if op.startswith("FFMA"):
        one_parity = len(reads) - len({r % 2 for r in reads}) >= 1
        return SOURCE_GROUPS[0] if one_parity else SOURCE_GROUPS[1], keep
    return ("LDS" if op.startswith("LDS") else "other"), keep


def source_stalls(step, flags, kernel, rows, sass):
    """Per group of instructions: executed warp instructions, samples, and the samples per stall reason."""
    acc = OrderedDict((g, dict(inst=0, samples=0, **{s: 0 for s in SOURCE_STALLS + ["other"]}))
                      for g in SOURCE_GROUPS)
    cached = {}
    for r, ins in zip(rows, sass):
        group, cached = instruction_group(ins, cached)
        a = acc[group]
        a["inst"] += int(to_float(r.get("Instructions Executed")) or 0)
        a["samples"] += int(to_float(r.get("# Samples")) or 0)
        for col, v in r.items():
            if not col or not col.startswith("stall_") or "(Not Issued)" in col:
                continue
            reason = col[len("stall_"):]
            a[reason if reason in SOURCE_STALLS else "other"] += int(to_float(v) or 0)
    return [dict(step=step, shape=flags, kernel=short_kernel(kernel), group=g, **a) for g, a in acc.items()]


def build_source_capture(work, out):
    """WORK_DIR/NNN.source.csv (+ NNN.flags) and WORK_DIR/sass.txt -> OUT_DIR/source_stalls.csv."""
    step = os.path.basename(os.path.normpath(out))
    ids = sorted(f.split(".")[0] for f in os.listdir(work) if f.endswith(".source.csv"))
    sass_path = os.path.join(work, "sass.txt")
    if not ids:
        return 0
    if not os.path.exists(sass_path):
        print(f"  {step}: no cuobjdump SASS beside the source counters: source_stalls.csv not written", file=sys.stderr)
        return 1
    with open(sass_path, encoding="utf-8", errors="replace") as f:
        funcs = parse_cuobjdump(f.read())
    rows = []
    for i in ids:
        with open(os.path.join(work, i + ".flags"), encoding="utf-8") as f:
            flags = norm_flags(f.read())
        with open(os.path.join(work, i + ".source.csv"), encoding="utf-8", errors="replace") as f:
            kernels = parse_source_csv(f.read())
        seen = []
        for kernel, recs in kernels:
            if (kernel, recs) in seen:  # ncu 2025.3 lists each kernel of a report twice on this page
                continue
            seen.append((kernel, recs))
            name = match_function(recs, funcs)
            if name is None:
                print(f"  {step} {flags}: no function of the SASS matches {short_kernel(kernel)}: skipped",
                      file=sys.stderr)
                continue
            rows += source_stalls(step, flags, kernel, recs, funcs[name])
    if not rows:
        return 1
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "source_stalls.csv"), "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(SOURCE_COLUMNS)
        for r in rows:
            w.writerow([r[c] for c in SOURCE_COLUMNS])
    print(f"  wrote {rel(out)}/source_stalls.csv ({len(rows)} rows: one per shape, kernel and instruction group)")
    return 0


# ---- the committed panels ------------------------------------------------------------------------
_LEGACY_METRICS = {"gpu__time_duration.sum": "time_us", "dram__bytes_read.sum": "dram_read_mb",
                   "dram__bytes_write.sum": "dram_write_mb", "lts__t_sector_hit_rate.pct": "l2_hit_pct",
                   "l1tex__t_sector_hit_rate.pct": "l1_hit_pct",
                   "dram__throughput.avg.pct_of_peak_sustained_elapsed": "dram_pct",
                   "sm__throughput.avg.pct_of_peak_sustained_elapsed": "sm_pct",
                   "sm__warps_active.avg.pct_of_peak_sustained_active": "occupancy_pct",
                   "launch__registers_per_thread": "regs"}


def legacy_rows(gpu=DOC_GPU):
    """profiles/<gpu>/ncu.csv, the older capture format ('# <step> <flags>' then ncu's --csv details
    page, nine metrics) -> metrics.csv rows with the other columns empty."""
    path = os.path.join(gpu_dir(gpu), "ncu.csv")
    if not os.path.exists(path):
        return []
    out, header, lines = [], None, []

    def flush():
        if header is None:
            return
        step, flags = header
        kernels = OrderedDict()
        for r in csv.DictReader(io.StringIO("\n".join(lines))):
            k = kernels.setdefault(r["ID"], {"kernel": r["Kernel Name"], "metrics": {}})
            k["metrics"][r["Metric Name"]] = (to_float(r["Metric Value"]), r["Metric Unit"])
        for i, k in kernels.items():
            row = OrderedDict((c, "") for c in METRICS_COLUMNS)
            row.update(step=step, shape=flags, problem=shape_label(flags), id=i, kernel=short_kernel(k["kernel"]))
            for name, (value, unit) in k["metrics"].items():
                if name in _LEGACY_METRICS and value is not None:
                    row[_LEGACY_METRICS[name]] = _convert(_LEGACY_METRICS[name], value, unit)
            out.append(row)

    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if line.startswith("# "):
                flush()
                step, _, flags = line[2:].partition(" ")
                header, lines = (step, norm_flags(flags)), []
            elif line.startswith('"'):
                lines.append(line)
    flush()
    return out


def load_panel(step, gpu=DOC_GPU):
    """(rows of the step's metrics.csv, the file they came from); the legacy ncu.csv where the step
    has no metrics.csv yet; ([], None) where neither has it."""
    path = os.path.join(gpu_dir(gpu), step, "metrics.csv")
    if os.path.exists(path):
        return read_csv(path), path
    rows = [r for r in legacy_rows(gpu) if r["step"] == step]
    return (rows, os.path.join(gpu_dir(gpu), "ncu.csv")) if rows else ([], None)


def value(row, key):
    """A panel value of one metrics.csv row as a float, or None (empty: not captured / unavailable)."""
    if key == "smem_kb":
        s, d = to_float(row.get("smem_static_kb")), to_float(row.get("smem_dynamic_kb"))
        return None if s is None and d is None else (s or 0.0) + (d or 0.0)
    return to_float(row.get(key))


def aggregate(rows):
    """A step's kernels on one shape -> one panel: durations, bytes and conflicts add up; percentages
    are duration-weighted means; registers and shared memory the largest; the stall reasons are the
    top three of the duration-weighted kernels' top three."""
    times = [value(r, "time_us") for r in rows]
    out = {"kernels": len(rows)}
    for c in PANEL:
        vals = [(value(r, c.key), t) for r, t in zip(rows, times)]
        vals = [(v, t) for v, t in vals if v is not None]
        if not vals:
            out[c.key] = None
        elif c.agg == "sum":
            out[c.key] = math.fsum(v for v, _ in vals)
        elif c.agg == "max":
            out[c.key] = max(v for v, _ in vals)
        else:
            w = [(v, t) for v, t in vals if t]
            out[c.key] = (math.fsum(v * t for v, t in w) / math.fsum(t for _, t in w)) if w else math.fsum(v for v, _ in vals) / len(vals)
    stalls, total, weight = {}, 0.0, 0.0
    for r, t in zip(rows, times):
        t = t or 1.0
        tot = to_float(r.get("stall_total_cpi"))
        if tot is None:
            continue
        total, weight = total + tot * t, weight + t
        for i in (1, 2, 3):
            name, cpi = r.get(f"stall{i}"), to_float(r.get(f"stall{i}_cpi"))
            if name and cpi is not None:
                stalls[name] = stalls.get(name, 0.0) + cpi * t
    out["stall_total_cpi"] = total / weight if weight else None
    out["stalls"] = sorted(((v / weight, k) for k, v in stalls.items()), reverse=True)[:3] if weight else []
    return out


# ---- formatting ----------------------------------------------------------------------------------
def fmt_number(v, kind):
    if v is None:
        return "-"
    if kind == "count":
        a = abs(v)
        if a >= 1e9:
            return f"{v / 1e9:.2f}G"
        if a >= 1e6:
            return f"{v / 1e6:.2f}M"
        if a >= 1e4:
            return f"{v / 1e3:.1f}k"
        return f"{v:.0f}"
    if kind == "int":
        return f"{v:.0f}"
    if kind == "pct":
        return f"{v:.1f}"
    a = abs(v)
    return f"{v:.0f}" if a >= 100 or v == 0 else f"{v:.1f}" if a >= 10 else f"{v:.2f}"


def fmt_delta(a, b, kind):
    """before a, after b -> ('+12.3', '+8%')."""
    if a is None or b is None:
        return "-", "-"
    d = b - a
    if d == 0:
        return "0", "0%"
    absolute = ("+" if d > 0 else "") + fmt_number(d, kind)
    if a == 0:
        return absolute, "-" if b == 0 else "new"
    return absolute, f"{100.0 * d / abs(a):+.0f}%"


def fmt_stall(entry, total):
    if not entry:
        return "-"
    cpi, name = entry
    share = f" ({100 * cpi / total:.0f}%)" if total else ""
    return f"{name} {cpi:.2f}{share}"


def md_table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def text_table(header, rows, left=1):
    """A terminal table: the first `left` columns left-aligned, the others right-aligned."""
    table = [list(map(str, header))] + [list(map(str, r)) for r in rows]
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    out = []
    for n, r in enumerate(table):
        out.append("  ".join(c.ljust(w) if i < left else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))))
        if n == 0:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(l.rstrip() for l in out)


# ---- side by side --------------------------------------------------------------------------------
def no_capture_note(step):
    return (f"No capture yet for step {step}: run `profiles/capture.sh {step[:2]}` on a GPU, then "
            f"`python3 profiles/results.py import DIR` (or commit the `profiles/<gpu>/{step}/` it wrote).")


def comparison(steps, gpu=DOC_GPU, shape=None):
    """-> (panels, shapes, notes): panels[step] = rows; shapes = the flags every step has (file order),
    filtered by the substring `shape` (of the flags or the label); notes = why something is missing."""
    panels, notes = OrderedDict(), []
    for s in steps:
        panels[s], _ = load_panel(s, gpu)
        if not panels[s]:
            notes.append(no_capture_note(s))
    have = [s for s in steps if panels[s]]
    order = [f for _, f in read_shapes()]
    common = []
    for s in have:
        for r in panels[s]:
            if r["shape"] not in common and all(any(x["shape"] == r["shape"] for x in panels[t]) for t in have):
                common.append(r["shape"])
    common.sort(key=lambda f: order.index(f) if f in order else len(order))
    if shape:
        common = [f for f in common if shape in f or shape in shape_label(f)]
    if len(have) > 1 and not common:
        listing = "; ".join(f"{s}: " + ", ".join(sorted({shape_label(r['shape']) for r in panels[s]})) for s in have)
        notes.append(f"No shape captured for all of {', '.join(have)}" + (f" matching '{shape}'" if shape else "") +
                     f" ({listing}).")
    return panels, common, notes


def compare_rows(steps, panels, flags):
    """The side-by-side table of the given steps on one shape (or on one shape each: a list of flags,
    one per step): header, body."""
    each = flags if isinstance(flags, (list, tuple)) else [flags] * len(steps)
    aggs = [aggregate([r for r in panels[s] if r["shape"] == f]) for s, f in zip(steps, each)]
    header = ["counter"]
    for i, s in enumerate(steps):
        header.append(f"{s[:2]} ({aggs[i]['kernels']} kernel{'s' if aggs[i]['kernels'] != 1 else ''})")
        if i:
            header += [f"{s[:2]} vs {steps[i - 1][:2]}", "%"]
    body = []
    for c in PANEL:
        if c.key in LATER_COUNTERS and all(a[c.key] is None for a in aggs):
            continue  # a counter added to the panel after these steps were captured: no row of '-'
        line = [c.label]
        for i, a in enumerate(aggs):
            line.append(fmt_number(a[c.key], c.kind))
            if i:
                line += list(fmt_delta(aggs[i - 1][c.key], a[c.key], c.kind))
        body.append(line)
    for n in range(3):
        line = [f"warp stall #{n + 1} (cycles per instruction, share)"]
        for i, a in enumerate(aggs):
            line.append(fmt_stall(a["stalls"][n] if len(a["stalls"]) > n else None, a["stall_total_cpi"]))
            if i:
                line += ["", ""]
        body.append(line)
    return header, body


def kernel_rows(step, panels, flags):
    """One step's kernels on one shape, one column each."""
    rows = [r for r in panels[step] if r["shape"] == flags]
    header = ["counter"] + [f"{r['kernel']}" for r in rows]
    body = [[c.label] + [fmt_number(value(r, c.key), c.kind) for r in rows] for c in PANEL
            if c.key not in LATER_COUNTERS or any(value(r, c.key) is not None for r in rows)]
    for n in range(1, 4):
        body.append([f"warp stall #{n}"] + [fmt_stall((to_float(r.get(f"stall{n}_cpi")), r.get(f"stall{n}"))
                                                      if r.get(f"stall{n}") else None, to_float(r.get("stall_total_cpi")))
                                            for r in rows])
    return header, body


def compare_report(steps, gpu=DOC_GPU, markdown=False, shape=None, kernels=False):
    """compare.py's output, and results.py's compare:NN blocks. -> (text, ok)."""
    panels, shapes, notes = comparison(steps, gpu, shape)
    table = md_table if markdown else text_table
    parts = []
    have = [s for s in steps if panels[s]]
    if len(have) < len(steps):  # a step without a capture: say so, and show no half comparison
        shapes = []
    for flags in shapes:
        title = f"{shape_label(flags)}  (`--profile {flags}`)" if markdown else f"{shape_label(flags)}  (--profile {flags})"
        parts.append(("**" + title + "**" if markdown else "== " + title) + "\n\n" + table(*compare_rows(have, panels, flags)))
        if kernels:
            for s in have:
                parts.append((f"*{s}, per kernel:*" if markdown else f"-- {s}, per kernel:") + "\n\n" +
                             table(*kernel_rows(s, panels, flags)))
    if parts:
        sources = sorted({rel(load_panel(s, gpu)[1]) for s in have})
        legacy = any(p.endswith("ncu.csv") for p in sources)
        foot = ("One launch after a warm-up under `ncu --clock-control none`; a step's kernels add up (durations, "
                "bytes, conflicts) or are weighted by duration (percentages). '-': not captured" +
                (" (the older ncu.csv holds nine of the panel's counters)" if legacy else "") + ". From " +
                ", ".join(f"`{p}`" for p in sources) + ".")
        parts.append(foot if markdown else foot.replace("`", ""))
    parts += notes if markdown else [n.replace("`", "") for n in notes]
    return "\n\n".join(parts), bool(shapes) and len(have) == len(steps)


# ---- command line (for capture.sh) ---------------------------------------------------------------
def main(argv):
    if len(argv) == 3 and argv[1] == "slug":
        print(gpu_slug(argv[2]))
        return 0
    if len(argv) == 2 and argv[1] == "ncu-metrics":
        print(",".join(ncu_metric_list()))
        return 0
    if len(argv) == 2 and argv[1] == "ncu-sections":
        print(" ".join(NCU_SECTIONS))
        return 0
    if len(argv) == 4 and argv[1] == "kernels":
        print(kernel_filter(argv[2], argv[3]))
        return 0
    if len(argv) == 3 and argv[1] == "shapes":
        for step, flags in read_shapes():
            if step == argv[2]:
                print(flags)
        return 0
    if len(argv) == 4 and argv[1] == "source":
        print(1 if wants_source(argv[2], argv[3]) else 0)
        return 0
    if len(argv) == 4 and argv[1] == "source-stalls":
        return build_source_capture(argv[2], argv[3])
    if len(argv) in (4, 6) and argv[1] == "panel":
        version = argv[5] if len(argv) == 6 and argv[4] == "--ncu-version" else ""
        return build_step_capture(argv[2], argv[3], version)
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))


# ---- kernel names ------------------------------------------------------------------------------
def _mangled_name(s, i):
    """<length><identifier> at s[i:] -> (identifier, next index)."""
    n = re.match(r"\d+", s[i:]).group(0)
    j = i + len(n)
    return s[j:j + int(n)], j + int(n)


_ENUMS = {"MatmulLayout": ("NT", "NN", "TN")}  # host/ops.h, in declaration order


def _mangled_args(s, i, subs):
    """'I' <args> 'E' at s[i:] -> (['__half', 'Cfg<64, 4>', '64', 'true'], next index). Knows what our
    kernels use: integer and bool literals, plain names, and names nested in a namespace (N...E, S_)."""
    assert s[i] == "I"
    i, args = i + 1, []
    while s[i] != "E":
        if s.startswith("LN", i):  # an enum literal: L N <scope> <name> E <value> E -> MatmulLayout::TN
            name, j = None, i + 2
            while s[j].isdigit():
                name, j = _mangled_name(s, j)
            end = s.index("E", j + 1)
            value = s[j + 1:end]
            args.append(f"{name}::{_ENUMS[name][int(value)]}" if name in _ENUMS else f"{name}({value})")
            i = end + 1
            continue
        if s.startswith(("Li", "Lj", "Lb"), i):
            end = s.index("E", i)
            lit = s[i + 2:end]
            args.append({"0": "false", "1": "true"}[lit] if s[i + 1] == "b" else lit.replace("n", "-"))
            i = end + 1
            continue
        if s[i] == "N":
            i += 1
            last = None
            while s[i] != "E":
                if s[i] == "S":
                    end = s.index("_", i)
                    last, i = subs[int(s[i + 1:end], 36) + 1 if end > i + 1 else 0], end + 1
                elif s[i] == "I":
                    inner, i = _mangled_args(s, i, subs)
                    last = f"{last}<{', '.join(inner)}>"
                else:
                    last, i = _mangled_name(s, i)
            args.append(last)
            i += 1
            continue
        name, i = _mangled_name(s, i)
        if s[i] == "I":
            inner, i = _mangled_args(s, i, subs)
            name = f"{name}<{', '.join(inner)}>"
        args.append(name)
    return args, i + 1


def demangle_short(name):
    """Enough of the Itanium demangler for our kernels' names:
    _ZN6step0112softmax_rowsILi4EEEvPKfPfi -> step01::softmax_rows<4>
    _ZN6step1110tc_forwardI6__halfNS_3CfgILi128ELi4ELi2ELi64ELi2ELb0EEEEEv... ->
        step11::tc_forward<__half, Cfg<128, 4, 2, 64, 2, false>>"""
    if not name.startswith("_ZN"):
        return name
    parts, i = [], 3
    while i < len(name) and name[i].isdigit():
        part, i = _mangled_name(name, i)
        parts.append(part)
    short = "::".join(parts)
    if name[i:i + 1] == "I":
        try:
            args, _ = _mangled_args(name, i, parts)
            short += f"<{', '.join(args)}>"
        except (AssertionError, AttributeError, IndexError, KeyError, ValueError):
            tmpl = re.match(r"ILi(\d+)EE", name[i:])  # the older, narrower reading
            short += f"<{tmpl.group(1)}>" if tmpl else ""
    return short
