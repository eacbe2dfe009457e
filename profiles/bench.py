#!/usr/bin/env python3
"""profiles/bench.py: every built step's benchmark sweep and PyTorch's SDPA baselines, in one CSV
and one plot.

  python3 profiles/bench.py                     # on a GPU: all of it; writes profiles/<gpu>/bench.csv and
                                                # bench.png, then re-renders the generated tables (results.py)
  python3 profiles/bench.py --steps 04,05       # only these steps (SDPA baselines still run)
  python3 profiles/bench.py --no-sdpa           # the steps only
  python3 profiles/bench.py --steps 07,08 --no-sdpa --merge profiles/h100/bench.csv
                                                # re-measure two steps, keep every other row
  python3 profiles/bench.py --steps 09,10,11 --merge profiles/h100/bench.csv
                                                # the tensor-core forward steps (fp16 and bf16) and SDPA's
                                                # forward (both backends) in one run; every other row kept
  python3 profiles/bench.py --plot-only         # no GPU: redraw profiles/h100/bench.png from the committed bench.csv
  python3 profiles/bench.py --show FILE.csv ... # print CSVs of the executables' format as terminal tables
  python3 profiles/bench.py --check-deps        # which optional parts are here (PyTorch, matplotlib)

Steps: `build/bin/NN_name --sweep --csv` for every built step, or `--sweep --bwd --csv` for a step
with a backward (its `--bwd --device-info` exits 0; those rows hold fwd, bwd and fwd+bwd). Their rows
are kept as printed.

Baselines (PyTorch with CUDA only): torch.nn.functional.scaled_dot_product_attention under
torch.nn.attention.sdpa_kernel(SDPBackend.FLASH_ATTENTION) (step 'sdpa_flash') and
SDPBackend.CUDNN_ATTENTION (step 'sdpa_cudnn'), on the attention sweep of the steps (batch·seq =
16384 tokens, heads = 2048/head_dim, seq 512...16384, head_dim 64 and 128, causal and not), fp16 and
bf16, layout [B, H, S, D], inputs uniform in [-0.5, 1.5) (dO in [-1, 1); Inputs below). With steps to run,
these rows are measured twice, before and after the steps, and hold the mean of the two passes (the drift
between the passes is printed). Timed as the steps are:
CUDA events around each launch, warm-up launches, at least 20 repetitions, the median, L2 flushed
before every repetition by writing a buffer twice its size. Rows: forward (problem 'B.. H.. S.. D..
[causal] f16'), backward ('... bwd', autograd.grad of the forward's output) and their sum ('...
fwd+bwd'); FLOPs by the FlashAttention convention (forward 4·B·H·S²·D, halved when causal; backward
2.5×, both 3.5×); % of peak of the dense fp16 tensor peak that the steps' --device-info prints. On step 22's
decode shapes (sdpa_decode_rows: the forward of three backends, GB/s of K/V) each backend is timed on
DECODE_PLACEMENTS allocations of its inputs and the fastest kept.

Inputs (--inputs): uniform by default, as above and as the committed bench.csv; `--inputs randn` runs the steps
with `--inputs randn` and draws SDPA's q, k, v, dout with torch.randn (standard normal, as FlashAttention's and
PyTorch's published benchmarks do), and `--inputs both` runs every step command and every SDPA cell on uniform
then on randn inputs, in turn. Rows measured on randn inputs have problems ending in ' randn' ('B8 H32 S2048 D64
f16 randn', 'B8 H32 S2048 D64 f16 bwd [deterministic] randn'; fa_profiles.split_inputs), so uniform rows keep
their names and the generated tables, which read problems with fp.split_problem, never mistake a randn row for
one (the plot, too, draws the uniform rows only); randn runs must write elsewhere than the committed bench.csv
(--out):
  python3 profiles/bench.py --steps 16,18 --inputs both --out profiles/h100/bench_inputs.csv --no-render

--merge CSV keeps CSV's rows of every numbered step this run did not measure, and of SDPA every row
(problem) this run did not re-measure: with --steps naming forward-only steps, SDPA's forward is
measured again beside them (same run), and its backward rows stay those measured beside the backward
steps; with --steps naming only steps with a backward (07, 08), the reverse: SDPA's bwd and fwd+bwd
rows are measured again and its forward rows (the forward steps' baselines) kept; with --steps naming
the decode steps alone (22, 23), only SDPA's decode rows are measured again (and the grouped-query and MHA
rows kept). Uniform and randn rows
are kept apart: a step measured now replaces only its rows of the inputs it was measured on.

Without PyTorch the baselines are skipped, without matplotlib the plot: each is said, and the CSV
and the terminal table are still written. While the steps run, OUT.partial holds the rows measured so far
(rewritten after every step command, with SDPA's first pass; removed once OUT is written), so a run cut short
by a time limit keeps what it measured.
"""
import argparse
import contextlib
import csv
import glob
import importlib.util
import io
import os
import re
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fa_profiles as fp  # noqa: E402

# The attention sweep of harness/family_attention.cpp (sweep()): the FlashAttention-2 benchmark shapes.
ATTN_SEQS = (512, 1024, 2048, 4096, 8192, 16384)
ATTN_DIMS = (64, 128)
TOKENS, MODEL_DIM = 16384, 2048
# Grouped-query attention: the same shapes with this many K/V heads (4 query heads per K/V head at d 64,
# 2 at d 128), forward only ('B8 H32 KV8 S2048 D64 f16').
GQA_KV_HEADS = 8


def say(msg):
    print(msg, file=sys.stderr, flush=True)


# ---- optional parts ------------------------------------------------------------------------------
def have_torch():
    """-> (torch module or None, why not)."""
    try:
        import torch  # noqa: F401
    except ImportError:
        return None, "PyTorch not found: SDPA baselines skipped (pip install torch)"
    if not torch.cuda.is_available():
        return None, f"PyTorch {torch.__version__} has no CUDA device: SDPA baselines skipped"
    return torch, ""


def have_matplotlib():
    if importlib.util.find_spec("matplotlib") is None:
        return False, "matplotlib not found: bench.png not drawn (apt-get install python3-matplotlib, or pip install matplotlib)"
    return True, ""


# ---- the steps -----------------------------------------------------------------------------------
def parse_rows(text):
    start = text.find("step,idea,problem")
    return list(csv.DictReader(io.StringIO(text[start:]))) if start >= 0 else []


# The host's input preparation (harness/attention_inputs.cpp) allocates the decode sweep's caches, up to 4 GiB of
# fp32 per tensor, and the kernel's page faults on their first touch were most of a sweep's time (one core, 4 KiB
# at a time). glibc (2.35 on) can back malloc's large blocks with transparent huge pages: fewer faults, the same
# inputs. Ignored by a glibc without the tunable; one already set in the environment is kept.
HUGE_PAGES = "glibc.malloc.hugetlb=1"


def step_env():
    tunables = os.environ.get("GLIBC_TUNABLES", "")
    return {**os.environ, "GLIBC_TUNABLES": tunables if "hugetlb" in tunables else
            ":".join(t for t in (tunables, HUGE_PAGES) if t)}


def run_csv(cmd):
    say("== " + " ".join(cmd))
    t0 = time.monotonic()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, env=step_env())
    rows = parse_rows(p.stdout)
    if p.returncode != 0:
        say(f"   exited {p.returncode} ({len(rows)} rows kept)")
    say(f"   {len(rows)} rows in {time.monotonic() - t0:.0f} s")  # what a device call's plan needs to know
    return rows, p.returncode


@contextlib.contextmanager
def pinned(env_var, value):
    """env_var set to `value` inside the block (None: unset there), as it was again after it: a step's pin."""
    old = os.environ.pop(env_var, None)
    if value is not None:
        os.environ[env_var] = str(value)
    try:
        yield
    finally:
        os.environ.pop(env_var, None)
        if old is not None:
            os.environ[env_var] = old


def run_pinned(cmd, env_var, value):
    """run_csv(cmd) with env_var set to `value` for this run only (None: unset), e.g. a step's pinned candidate
    or split count. A run that fails is fatal: the table it feeds would compare against nothing."""
    with pinned(env_var, value):
        rows, rc = run_csv(cmd)
    if rc:
        raise SystemExit(f"{env_var}={value} failed on {' '.join(cmd)}")
    return rows


def write_tagged_csv(path, tag, rows):
    """The executables' rows, each with its `tag` column first (the pinned value it ran with)."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=[tag] + [k for k in rows[0] if k != tag])
        w.writeheader()
        w.writerows(rows)
    print(f"wrote {path}: {len(rows)} rows")


def device_info(exe):
    """The device name and the dense fp16 tensor peak (TFLOP/s) as the step executables print them."""
    p = subprocess.run([exe, "--device-info"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    name = re.search(r"^device \d+: (.*?) \(sm_", p.stdout, re.M)
    peak = re.search(r"FP16 tensor ([\d.]+) TFLOP/s", p.stdout)
    return (name.group(1) if name else ""), (float(peak.group(1)) if peak else -1.0)


def step_exes(build, only):
    exes = sorted(e for e in glob.glob(os.path.join(build, "bin", "[0-9][0-9]_*")) if os.access(e, os.X_OK))
    return [e for e in exes if not only or os.path.basename(e)[:2] in only]


# An ablation variant ("no-...": the step with one technique switched off, steps 18 and 19) is timed on these
# cells only, fp16, not on the whole sweep: FA2 shapes at a short and a long sequence, each head_dim,
# causal and not. The default variant's sweep rows hold the same cells.
ABLATION_SEQS = (2048, 8192)


def ablation_args():
    return [["--batch", str(TOKENS // s), "--heads", str(MODEL_DIM // d), "--seq", str(s), "--head-dim", str(d),
             "--dtype", "f16"] + (["--causal"] if causal else [])
            for s in ABLATION_SEQS for d in ATTN_DIMS for causal in (False, True)]


def step_rows(exes, gqa_only=False, inputs=("uniform",), progress=None, only_variants=None):
    """Every step's sweep rows, each command once per entry of `inputs` in turn (--inputs randn added for randn:
    its rows' problems end in ' randn'). progress(rows): called with the rows so far after every command.
    only_variants: a set of variant names; a step with variants sweeps only those it has (all if it has none;
    a decode step without it: DECODE_SWEPT's)."""
    rows, failed = [], 0

    def run_each(cmd):
        nonlocal rows, failed
        for x in inputs:
            r, rc = run_csv(cmd + (["--inputs", x] if x != "uniform" else []))
            rows, failed = rows + r, failed + (rc != 0)
            if progress:
                progress(rows)

    for exe in exes:
        # A step with a backward sweeps with --bwd: its rows hold the forward, the backward and
        # their sum (a plain --sweep would repeat the forward rows). A step with named variants
        # (--variant) sweeps once per variant; the rows of a non-default one name it ("[name]").
        # gqa_only: none of these, only the grouped-query sweep below.
        cmd = [exe, "--sweep", "--bwd", "--csv"] if has_backward(exe) else [exe, "--sweep", "--csv"]
        names = variants(exe)
        if only_variants and names:
            names = [v for v in names if v in only_variants]
        elif names and os.path.basename(exe)[:2] in DECODE_SWEPT:
            names = [v for v in names if v in DECODE_SWEPT[os.path.basename(exe)[:2]]]
        for v in [] if gqa_only else names or [None]:
            cmds = [[exe, "--bench", "--csv", "--variant", v] + a for a in ablation_args()] \
                if v and v.startswith("no-") else [cmd + (["--variant", v] if v else [])]
            for c in cmds:
                run_each(c)
        # A forward-only step that runs GQA: its sweep again with GQA_KV_HEADS K/V heads. (A step with a
        # backward takes its forward from a forward step, whose GQA rows are these.)
        if runs_gqa(exe) and not has_backward(exe):
            run_each([exe, "--sweep", "--kv-heads", str(GQA_KV_HEADS), "--csv"])
    return rows, failed


def runs_gqa(exe):
    """Whether a step runs grouped-query attention on the FA2 sweep: its --help offers --kv-heads without 'runs
    only the default', and its --sweep is the family's (step 22's decode shapes name their own K/V heads)."""
    p = subprocess.run([exe, "--help"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    m = re.search(r"^\s*--kv-heads\b(.*(?:\n\s{8,}.*)*)", p.stdout, re.M)
    return bool(m) and "runs only the default" not in m.group(1) and "its own K/V heads" not in m.group(1)


def variants(exe):
    """The names a step's --variant accepts, from its --help ('(atomic|deterministic)'), or []."""
    p = subprocess.run([exe, "--help"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    m = re.search(r"^\s*--variant\b.*\(([\w|-]+)\)\s*$", p.stdout, re.M)
    return m.group(1).split("|") if m else []


def auto_sdpa_modes(requested, steps_named, backward):
    """The SDPA rows a run measures: the requested ones, or for 'auto' the ones its steps are
    compared with, so that --merge keeps the others from the run that measured their steps. The
    forward rows pair with the forward-only steps (09-11), the backward rows with 07/08.
    backward: has_backward() of each step run."""
    if requested != "auto":
        return requested
    if not steps_named or not backward or (any(backward) and not all(backward)):
        return "all"
    return "bwd" if all(backward) else "fwd"


def has_backward(exe):
    return subprocess.run([exe, "--bwd", "--device-info"], stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL).returncode == 0


def merge_rows(old, new, by_problem=False):
    """--merge: the new rows, and the old rows of every step this run did not measure. A numbered step
    measured now replaces all its old rows of the same inputs (uniform or randn) (with `by_problem`, as --gqa-only: only those of the problems it
    measured now); a baseline (sdpa_*) replaces only the rows (problems) it measured now, so a forward-only
    SDPA run keeps the backward rows measured beside the backward steps.
    -> (rows: numbered steps in order, then the baselines; how many old rows were kept)."""
    if by_problem:
        now = {(r["step"], r["problem"]) for r in new}
        kept = [r for r in old if (r["step"], r["problem"]) not in now]
        rows = kept + new
        return sorted((r for r in rows if r["step"][:2].isdigit()), key=lambda r: r["step"]) + \
            [r for r in rows if not r["step"][:2].isdigit()], len(kept)
    # A numbered step measured now replaces its old rows of the inputs it was measured on (uniform or randn:
    # fp.split_inputs), so a randn run merged into a file keeps that step's uniform rows, and the reverse.
    steps_now = {(r["step"], fp.split_inputs(r["problem"])[1]) for r in new if r["step"][:2].isdigit()}
    base_now = {(r["step"], r["problem"]): r for r in new if not r["step"][:2].isdigit()}
    kept, used = 0, set()
    numbered = [r for r in old if r["step"][:2].isdigit() and (r["step"], fp.split_inputs(r["problem"])[1]) not in steps_now]
    kept += len(numbered)
    numbered = sorted(numbered + [r for r in new if r["step"][:2].isdigit()], key=lambda r: r["step"])
    baselines = []
    for r in old:
        if r["step"][:2].isdigit():
            continue
        key = (r["step"], r["problem"])
        if key in base_now:
            baselines.append(base_now[key])
            used.add(key)
        else:
            baselines.append(r)
            kept += 1
    baselines += [r for key, r in base_now.items() if key not in used]
    return numbered + baselines, kept


# ---- the SDPA baselines --------------------------------------------------------------------------
# GPU cycles of the hold before each timed SDPA call (torch.cuda._sleep): about 0.3 ms at the H100's clocks; the
# steps' timer holds as long (harness/timer.h, TimingOptions::hold_cycles)
HOLD_CYCLES = 1 << 19


def median_ms(torch, fn, flush, reps, warmup):
    """CUDA events around each call, L2 flushed (2×L2 written) before each; the median in ms.
    The events must time the GPU, not the host. A short decode call runs on the GPU in less time than
    SDPA's dispatch takes on the host (Python, the dispatcher, the backend's plan), so once the GPU has
    caught up with the host it would wait between the start event and the call's first kernel, and the
    events would time that wait. A spin on the GPU after the flush (torch.cuda._sleep, HOLD_CYCLES) keeps it
    busy while the host enqueues the start event, the call and the end event. The steps' C++ timer holds the same
    way (harness/timer.h), so that both start their calls on a GPU that has been quiet for as long."""
    hold = getattr(torch.cuda, "_sleep", None)
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for i, (a, b) in enumerate(events):
        flush.fill_(i & 0xFF)
        if hold:
            hold(HOLD_CYCLES)
        a.record()
        fn()
        b.record()
    torch.cuda.synchronize()
    return statistics.median(a.elapsed_time(b) for a, b in events)


def time_sdpa(torch, q, k, v, dout, causal, flush, reps, warmup, bwd=True):
    """-> (forward ms, backward ms or None) of SDPA under the backend in force. K and V with fewer heads
    than Q: grouped-query attention (enable_gqa)."""
    import torch.nn.functional as F
    gqa = k.shape[1] != q.shape[1]

    def fwd():
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, **({"enable_gqa": True} if gqa else {}))

    if not bwd:  # timed as below (autograd on: the forward a training step runs, LSE saved as the steps write it)
        return median_ms(torch, fwd, flush, reps, warmup), None
    out = fwd()
    tf = median_ms(torch, fwd, flush, reps, warmup)
    tb = median_ms(torch, lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True), flush, reps, warmup)
    return tf, tb


def under_backend(sdpa_kernel, backend, step, what, refused, fn):
    """fn() under SDPA backend `backend`, or None when the backend refuses the shape: the refusal said once per
    (step, reason), with `what` naming the shape."""
    try:
        with sdpa_kernel(backend):
            return fn()
    except RuntimeError as e:
        why = str(e).strip().splitlines()[0][:160]
        if (step, why) not in refused:
            say(f"   {step}: {what}: {why} (skipped; further such skips not repeated)")
            refused.add((step, why))
        return None


def flush_buffer(torch):
    """A buffer twice the L2's size: median_ms writes it before each repetition (conventions, 'Measurement')."""
    l2 = int(getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 0) or (128 << 20))
    return torch.empty(2 * l2, dtype=torch.uint8, device="cuda")


def sdpa_row(torch, step, what, problem, ms, rate, unit, peak, peak_value, device):
    """One baseline row in the steps' CSV columns (no previous step, no baseline of its own)."""
    return dict(step=step, idea=f"PyTorch {torch.__version__} SDPA, {what}", problem=problem, time_ms=f"{ms:.6g}",
                rate=f"{rate:.6g}", unit=unit, pct_peak=f"{100 * rate / peak_value:.4g}" if peak_value > 0 else "-1",
                peak=peak, peak_value=f"{peak_value:.6g}", prev_step="", prev_time_ms="-1", speedup_vs_prev="-1",
                err_vs_prev="-1", check="", baseline="", baseline_time_ms="-1", vs_baseline="-1", device=device)


def draw_input(torch, shape, dtype, inputs, lo, hi):
    """A tensor drawn as the steps draw theirs (harness/attention_inputs.h): uniform in [lo, hi), or for 'randn'
    standard normal (torch.randn, as published benchmarks draw theirs)."""
    if inputs == "randn":
        return torch.randn(*shape, device="cuda", dtype=dtype)
    return torch.rand(*shape, device="cuda", dtype=dtype).mul_(hi - lo).add_(lo)


def sdpa_rows(torch, tensor_peak, reps, warmup, modes="all", kv_heads=0, inputs=("uniform",)):
    """modes: 'all' (fwd, bwd, fwd+bwd rows), 'fwd', or 'bwd' (the bwd and fwd+bwd rows only). kv_heads:
    K and V with that many heads (grouped-query attention, problems 'B.. H.. KV..'); 0: as many as Q. inputs:
    each cell once per entry, in turn ('randn': its rows' problems end in ' randn')."""
    bwd = modes != "fwd"
    from torch.nn.attention import SDPBackend, sdpa_kernel
    flush, device = flush_buffer(torch), torch.cuda.get_device_name(0)
    backends = [("sdpa_flash", SDPBackend.FLASH_ATTENTION, "FlashAttention-2 backend"),
                ("sdpa_cudnn", SDPBackend.CUDNN_ATTENTION, "cuDNN backend")]
    rows, refused = [], set()
    torch.manual_seed(0)
    for causal, d, seq in ((c, d, s) for c in (False, True) for d in ATTN_DIMS for s in ATTN_SEQS):
        b, h = TOKENS // seq, MODEL_DIM // d
        flop = 4.0 * b * h * seq * seq * d / (2.0 if causal else 1.0)
        kvh = kv_heads if 0 < kv_heads < h else h
        shape = f"B{b} H{h}" + (f" KV{kvh}" if kvh != h else "") + f" S{seq} D{d}" + (" causal" if causal else "")
        for dname, dtype, x in ((n, t, x) for n, t in (("f16", torch.float16), ("bf16", torch.bfloat16))
                                for x in inputs):
            q, k, v = (draw_input(torch, (b, heads, seq, d), dtype, x, -0.5, 1.5).requires_grad_() for heads in (h, kvh, kvh))
            dout = draw_input(torch, (b, h, seq, d), dtype, x, -1, 1)
            for step, backend, what in backends:
                times = under_backend(sdpa_kernel, backend, step, f"{shape} {dname}", refused,
                                      lambda: time_sdpa(torch, q, k, v, dout, causal, flush, reps, warmup, bwd))
                if times is None:
                    continue
                tf, tb = times
                both = tf + tb if tb is not None else None  # no backward timed in "fwd" mode
                rows_of = {"all": (("", tf, 1.0), (" bwd", tb, 2.5), (" fwd+bwd", both, 3.5)),
                           "fwd": (("", tf, 1.0),), "bwd": ((" bwd", tb, 2.5), (" fwd+bwd", both, 3.5))}
                for mode, ms, factor in rows_of[modes]:
                    rate = factor * flop / (ms * 1e-3) * 1e-12
                    rows.append(sdpa_row(torch, step, what, fp.with_inputs(f"{shape} {dname}{mode}", x), ms, rate,
                                         "TFLOP/s", "tensor", tensor_peak, device))
            say(f"   sdpa {fp.with_inputs(f'{shape} {dname}', x)}: done")
    return rows


def bracket_mean(before, after):
    """SDPA's rows measured before and after the steps: each row's time the mean of its two passes (a drift of
    the GPU's clocks between the passes cancels to first order, instead of landing on every ratio), its rate
    and % of peak scaled to that time; a row of one pass only is kept as measured. Says the drift (second
    pass over first), and returns (rows, drifts)."""
    first = {(r["step"], r["problem"]): r for r in before}
    out, drifts, seen = [], [], set()
    for r in after:
        key = (r["step"], r["problem"])
        seen.add(key)
        b = first.get(key)
        if b is None:
            out.append(r)
            continue
        t_after, t_before = float(r["time_ms"]), float(b["time_ms"])
        t = (t_after + t_before) / 2
        row = dict(r, time_ms=f"{t:.6g}", rate=f"{float(r['rate']) * t_after / t:.6g}")
        if float(r["pct_peak"]) > 0:
            row["pct_peak"] = f"{float(r['pct_peak']) * t_after / t:.4g}"
        drifts.append(t_after / t_before - 1)
        out.append(row)
    out += [r for r in before if (r["step"], r["problem"]) not in seen]
    if drifts:
        d = sorted(drifts)
        say(f"SDPA, second pass over first: median {statistics.median(d):+.1%}, {d[0]:+.1%} to {d[-1]:+.1%} "
            f"over {len(d)} rows (the rows hold the mean of the two)")
    return out, drifts


# Decoding (step 22's sweep, harness: decode_sweep): one query row per head, 32 query heads of d 128 over
# 32, 8 and 1 K/V heads, batch 1, 8, 64, full caches of 1k-128k keys, K and V at most 2^30 elements each.
DECODE_BATCHES, DECODE_KV_HEADS, DECODE_LENS = (1, 8, 64), (32, 8, 1), (1024, 4096, 16384, 65536, 131072)
DECODE_HEADS, DECODE_DIM = 32, 128
DECODE_STEPS = {"22", "23"}  # the steps timed on these shapes (23: paged, in pages of 16 and of 1 key)
# The decode steps' variants a sweep runs when --variants does not name them: those the docs' tables read from
# bench.csv. The others (step 22's rows32, unpacked, tiles128; step 23's two-launches, unpacked) are experiments,
# timed against the default by profiles/knob_ab.py --decode (gpu_session.sh stage decodeab).
DECODE_SWEPT = {"22": {"one-launch", "two-launches"}, "23": {"one-launch"}}


def decode_flags(batch, kv_heads, keys):
    """A decode shape's flags as the sweep runs it: fp16, DECODE_HEADS query heads of d DECODE_DIM, one query
    row, every sequence as long as the cache (profiles/knob_ab.py --decode, profiles/decode_splits.py)."""
    return ["--dtype", "f16", "--batch", str(batch), "--heads", str(DECODE_HEADS), "--kv-heads", str(kv_heads),
            "--seq-q", "1", "--seq-k", str(keys), "--head-dim", str(DECODE_DIM), "--cache-lens", str(keys)]


def copy_gbs(torch, flush, reps, warmup):
    """The device's copy bandwidth as the steps measure it (harness/device_info.cpp): a device-to-device copy
    of a 1 GiB buffer, bytes read + written over the median time, GB/s."""
    n = 1 << 30
    src, dst = torch.empty(n, dtype=torch.uint8, device="cuda"), torch.empty(n, dtype=torch.uint8, device="cuda")
    ms = median_ms(torch, lambda: dst.copy_(src), flush, reps, warmup)
    del src, dst
    return 2.0 * n / (ms * 1e-3) * 1e-9


# SDPA's decode on this many allocations of its inputs, the fastest kept. At the smallest caches (a few
# microseconds of K/V traffic) its event-timed median falls on discrete levels up to a couple of microseconds
# apart, with the same kernels running as long: between allocations in one probe, between processes in a later
# one (doc 22's history, "SDPA-cuDNN's timer, not its inputs"); one timing could catch it at a slow level and
# flatter the steps, and the fastest of several can only move SDPA down. Every allocation is held until the
# shape is done, so that each lies elsewhere.
DECODE_PLACEMENTS = 3


def sdpa_decode_rows(torch, reps, warmup, inputs=("uniform",), placements=DECODE_PLACEMENTS):
    """SDPA's forward on step 22's decode shapes, every backend that runs them (flash, cuDNN, efficient), each
    sequence as long as the cache (SDPA has no per-sequence lengths); not causal (one query row sees the whole
    cache, as step 22's causal does at the end of a sequence). Rows 'B8 H32 KV8 Sq1 Sk4096 D128 cache f16':
    GB/s of K/V bytes read, against the copy bandwidth measured in the same run. Inputs uniform in [0, 1), or
    standard normal for 'randn' (rows '... f16 randn'). Each shape's inputs drawn `placements` times (fresh
    draws, all held at once), each backend timed on every draw, its fastest median kept (DECODE_PLACEMENTS)."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    flush, device = flush_buffer(torch), torch.cuda.get_device_name(0)
    copy = copy_gbs(torch, flush, reps, warmup)
    say(f"   copy bandwidth: {copy:.0f} GB/s")
    backends = [("sdpa_flash", SDPBackend.FLASH_ATTENTION, "FlashAttention-2 backend"),
                ("sdpa_cudnn", SDPBackend.CUDNN_ATTENTION, "cuDNN backend"),
                ("sdpa_efficient", SDPBackend.EFFICIENT_ATTENTION, "memory-efficient backend")]
    rows, refused = [], set()
    torch.manual_seed(0)
    for b, kvh, n, x in ((b, k, n, x) for b in DECODE_BATCHES for k in DECODE_KV_HEADS for n in DECODE_LENS
                         for x in inputs):
        if b * kvh * n * DECODE_DIM > 1 << 30:
            continue
        h, d = DECODE_HEADS, DECODE_DIM
        shape = fp.with_inputs(f"B{b} H{h}" + (f" KV{kvh}" if kvh != h else "") + f" Sq1 Sk{n} D{d} cache f16", x)
        draws = [(draw_input(torch, (b, h, 1, d), torch.float16, x, 0, 1),
                  draw_input(torch, (b, kvh, n, d), torch.float16, x, 0, 1),
                  draw_input(torch, (b, kvh, n, d), torch.float16, x, 0, 1)) for _ in range(placements)]
        extra = {"enable_gqa": True} if kvh != h else {}
        kv_bytes = 2.0 * b * kvh * n * d * 2
        for step, backend, what in backends:
            times = []
            for q, k, v in draws:
                with torch.no_grad():
                    times.append(under_backend(sdpa_kernel, backend, step, shape, refused, lambda: median_ms(
                        torch, lambda: F.scaled_dot_product_attention(q, k, v, **extra), flush, reps, warmup)))
            if None in times:
                continue
            ms = min(times)
            rate = kv_bytes / (ms * 1e-3) * 1e-9
            label = what + (f", fastest of {placements} allocations of its inputs" if placements > 1 else "")
            rows.append(sdpa_row(torch, step, label, shape, ms, rate, "GB/s", "copy", copy, device))
        del draws
        say(f"   sdpa {shape}: done")
    return rows


# ---- output --------------------------------------------------------------------------------------
def write_csv(path, rows):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=fp.BENCH_COLUMNS, extrasaction="ignore", lineterminator="\n")
        w.writeheader()
        w.writerows(rows)


def show(rows):
    def n(v, f):
        x = fp.to_float(v)
        return "-" if x is None or x < 0 else f.format(x)
    body = [[r["step"], r["problem"], n(r["time_ms"], "{:.4f}"), n(r["rate"], "{:.1f}") + " " + r["unit"],
             n(r["pct_peak"], "{:.1f}%") + " " + r["peak"], n(r["speedup_vs_prev"], "{:.2f}x"), r.get("check", "")]
            for r in rows]
    return fp.text_table(["step", "problem", "time (ms)", "rate", "% of peak", "x prev", "check"], body, left=2)


# The baselines in black, told apart by their markers, the same in every panel; the steps in colours that are
# never black or grey (tab10 without its grey, then tab20b/c shades; none near black, so no step is mistaken
# for an SDPA line), one colour per step across all panels.
BASELINE_MARKERS = {"sdpa_flash": "s", "sdpa_cudnn": "^", "sdpa_efficient": "v"}
STEP_COLORS = list(__import__("itertools").chain(
    ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#bcbd22", "#17becf"],
    ["#e7ba52", "#e6550d", "#31a354", "#843c39", "#7b4173", "#3182bd", "#8c6d31", "#637939", "#d6616b"]))


def series_style(label, dtype, colors):
    baseline = label.startswith("sdpa")
    return dict(color="black" if baseline else colors[label], linestyle="--" if dtype == "bf16" else "-",
                marker=BASELINE_MARKERS.get(label, "s") if baseline else "o", markersize=3.5,
                linewidth=1.2 if baseline else 1.6)


def plot(rows, png, source):
    """bench.png: softmax GB/s, matmul TFLOP/s against cuBLAS, attention forward (fp32 steps; tensor-core
    steps) and backward TFLOP/s, each beside SDPA's two backends in fp16 and bf16."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    fig, axes = plt.subplots(7, 2, figsize=(12, 38))
    device = next((r["device"] for r in rows if r.get("device")), "unknown GPU")
    fig.suptitle(f"{device}: the steps and their baselines (generated by profiles/bench.py from {source})\n"
                 "attention panels: steps in colour (circles), SDPA in black (squares FlashAttention-2, triangles "
                 "cuDNN); solid fp32/fp16, dashed bf16", fontsize=12, y=0.995)

    # Softmax: GB/s per shape, and the device copy measured in the same runs.
    ax = axes[0][0]
    soft = [r for r in rows if r["unit"] == "GB/s" and re.fullmatch(r"\d+x\d+", r["problem"])]
    shapes = list(dict.fromkeys(r["problem"] for r in soft))
    for step in dict.fromkeys(r["step"] for r in soft):
        pts = {r["problem"]: float(r["rate"]) for r in soft if r["step"] == step}
        ax.plot(range(len(shapes)), [pts.get(s, float("nan")) for s in shapes], marker="o", label=step)
    copies = [float(r["peak_value"]) for r in soft if r["peak"] == "copy"]
    if copies:
        ax.axhline(statistics.median(copies), color="grey", linestyle=":", label="device copy (same runs)")
    ax.set_xticks(range(len(shapes)))
    ax.set_xticklabels([s.replace("x", "×") for s in shapes], rotation=20)
    top = max([float(r["rate"]) for r in soft] + copies + [1.0])
    ax.set(title="softmax", xlabel="shape (rows × columns)", ylabel="GB/s (x read once, y written once)",
           ylim=(0, 1.1 * top))

    # Matmul: TFLOP/s against M = N = K, per layout, with cuBLAS from the same runs.
    ax = axes[0][1]
    mm = [r for r in rows if r["baseline"] and re.fullmatch(r"(\d+)x\1x\1 (NN|NT|TN)", r["problem"])]
    for i, layout in enumerate(dict.fromkeys(r["problem"].split()[1] for r in mm)):
        pts = sorted((int(r["problem"].split("x")[0]), float(r["rate"]), float(r["time_ms"]), float(r["baseline_time_ms"]))
                     for r in mm if r["problem"].endswith(layout))
        color = f"C{i}"
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", color=color, label=f"{mm[0]['step'][:2]} {layout}")
        ax.plot([p[0] for p in pts], [p[1] * p[2] / p[3] for p in pts], marker="s", linestyle="--", color=color,
                label=f"{mm[0]['baseline']} {layout}")
    ax.set_xscale("log", base=2)
    ax.set(title="fp32 matmul: the step solid (circles), cuBLAS dashed (squares)", xlabel="M = N = K",
           ylabel="TFLOP/s", ylim=(0, None))

    # Attention: TFLOP/s against seq, one panel per (mode, head_dim, causal).
    attn = []
    for r in rows:
        p = fp.split_problem(r["problem"])
        if p and r["unit"] == "TFLOP/s" and fp.to_float(r["rate"]) and float(r["rate"]) > 0 and p["mode"] in ("fwd", "bwd"):
            attn.append((p, r))
    labels = list(dict.fromkeys(sorted((r["step"] for _, r in attn), key=lambda s: (s.startswith("sdpa"), s))))
    steps_only = [l for l in labels if not l.startswith("sdpa")]
    colors = {l: STEP_COLORS[i % len(STEP_COLORS)] for i, l in enumerate(steps_only)}
    colors.update({l: "black" for l in labels if l not in colors})
    # Forward twice: the fp32 steps (log scale: they run at a tenth of SDPA's rate), then the tensor-core
    # steps (fp16/bf16) on a linear scale beside the same SDPA series; the backward once.
    panels = [(mode, kind, d, causal) for mode, kind in (("fwd", "fp32"), ("fwd", "tc"), ("bwd", "all"))
              for d in ATTN_DIMS for causal in (False, True)]
    for (mode, kind, d, causal), ax in zip(panels, [a for row in axes[1:] for a in row]):
        series = {}
        for p, r in attn:
            if (p["mode"], p["d"], p["causal"]) != (mode, d, causal):
                continue
            if r["step"][:2].isdigit() and kind != "all" and (p["dtype"] == "f32") != (kind == "fp32"):
                continue
            # A backward step's forward rows ("... fwd") are the forward step's it runs: drawn once, there
            # (04 runs its own forward).
            if mode == "fwd" and r["problem"].strip().endswith(" fwd") and not r["step"].startswith("04"):
                continue
            series.setdefault((r["step"], p["dtype"]), {}).setdefault(p["seq"], float(r["rate"]))
        dtype_order = {"f32": 0, "f16": 1, "bf16": 2}
        named = set()  # one legend entry per series name: its dtypes differ by line style (suptitle)
        for (label, dtype), pts in sorted(series.items(), key=lambda kv: (labels.index(kv[0][0]), dtype_order[kv[0][1]])):
            xs = sorted(pts)
            ax.plot(xs, [pts[x] for x in xs], label="_nolegend_" if label in named else label,
                    **series_style(label, dtype, colors))
            named.add(label)
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_locator(FixedLocator(ATTN_SEQS))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xticklabels([f"{s // 1024}k" if s >= 1024 else str(s) for s in ATTN_SEQS])
        what = {"fp32": "forward, fp32 steps", "tc": "forward, tensor-core steps (fp16/bf16)", "all": "backward"}[kind]
        ax.set_title(f"attention {what}, head_dim {d}, {'causal' if causal else 'not causal'}", fontsize=10)
        values = [v for pts in series.values() for v in pts.values()]
        if kind == "tc" and series and not any(st[:2].isdigit() for st, _ in series):
            ax.text(0.5, 0.06, "steps 09-11: not measured yet", ha="center", va="bottom", transform=ax.transAxes,
                    color="grey")
        if values and max(values) > 5 * min(values) and kind != "tc":  # fp32 steps, fp16 baselines: log scale
            ax.set_yscale("log")
            ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
            ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: f"{v:g}" if str(v)[0] in "25" else ""))
            ax.set_ylabel("TFLOP/s (log scale)")
        else:
            ax.set_ylim(0, 1.15 * max(values) if values else 1)
            ax.set_ylabel("TFLOP/s")
        ax.set_xlabel("seq (batch·seq = 16384)")
        ax.grid(True, which="both", alpha=0.3)
        if not series:
            ax.text(0.5, 0.5, "no rows in bench.csv yet", ha="center", va="center", transform=ax.transAxes, color="grey")
        else:  # a legend in every panel, below its axes so it covers no data: each line is named where it is drawn
            ax.legend(fontsize=7, ncol=3, loc="upper center", bbox_to_anchor=(0.5, -0.14), frameon=False)
    for ax in axes[0]:
        ax.grid(True, alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=8)
    inch = 1.0 / fig.get_figheight()  # figure fraction per inch
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.67 * inch), h_pad=4)  # below the two-line title; room for the legends
    os.makedirs(os.path.dirname(os.path.abspath(png)), exist_ok=True)
    fig.savefig(png, dpi=100, metadata={"Software": None})
    plt.close(fig)


def draw(rows, png, source):
    ok, why = have_matplotlib()
    if not ok:
        say(why)
        return False
    plot(rows, png, source)
    say(f"wrote {fp.rel(png) if png.startswith(fp.ROOT) else png}")
    return True


# ---- main ----------------------------------------------------------------------------------------
def main(argv=None):
    ap = argparse.ArgumentParser(prog="bench.py", description=__doc__.split("\n\n")[0],
                                 epilog=__doc__.split("\n\n", 1)[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", help="comma-separated step numbers to run (default: every built step)")
    ap.add_argument("--no-steps", action="store_true", help="run no step (the SDPA baselines only)")
    ap.add_argument("--no-sdpa", action="store_true", help="skip the PyTorch SDPA baselines")
    ap.add_argument("--variants", help="comma-separated variant names: a step with named variants sweeps only "
                    "those of them it has (e.g. full,atomic: each step's default, to fit a time limit)")
    ap.add_argument("--sdpa-modes", choices=("auto", "all", "fwd", "bwd"), default="auto",
                    help="SDPA rows to measure: all (fwd, bwd, fwd+bwd), fwd, bwd (bwd and fwd+bwd), or auto "
                         "(default): fwd when --steps names only forward-only steps, bwd when it names only steps "
                         "with a backward, else all")
    ap.add_argument("--gqa-only", action="store_true",
                    help="only grouped-query attention: the GQA sweep of each named forward step that runs it and "
                         "SDPA's GQA forward; with --merge, every other row (of these steps too) kept")
    ap.add_argument("--inputs", choices=("uniform", "randn", "both"), default="uniform",
                    help="how the steps (their --inputs) and SDPA draw Q, K, V, dO: uniform (default: the committed "
                         "rows), randn (standard normal, as published benchmarks; rows end in ' randn'), or both "
                         "(each command and SDPA cell on uniform, then randn, in turn); randn needs --out")
    ap.add_argument("--merge", metavar="CSV",
                    help="keep CSV's rows of every step (and baseline) this run did not measure: re-measure a few "
                         "steps into a complete bench.csv")
    ap.add_argument("--build", default=os.path.join(fp.ROOT, "build"), help="the build folder (default: build/)")
    ap.add_argument("--out", help="the CSV to write (default: profiles/<gpu>/bench.csv)")
    ap.add_argument("--png", help="the plot to draw (default: bench.png beside the CSV)")
    ap.add_argument("--no-plot", action="store_true", help="do not draw the plot")
    ap.add_argument("--no-render", action="store_true", help="do not re-render the generated tables afterwards")
    ap.add_argument("--reps", type=int, default=20, help="timed repetitions of each SDPA call (at least 20)")
    ap.add_argument("--warmup", type=int, default=3, help="untimed warm-up calls (default 3)")
    ap.add_argument("--plot-only", action="store_true", help="redraw the plot from an existing CSV (--csv), run nothing")
    ap.add_argument("--csv", help=f"with --plot-only: the CSV to read (default profiles/{fp.DOC_GPU}/bench.csv)")
    ap.add_argument("--show", nargs="+", metavar="CSV", help="print these CSVs as terminal tables, run nothing")
    ap.add_argument("--check-deps", action="store_true", help="say which optional parts are present, run nothing")
    a = ap.parse_args(argv)
    if a.reps < 20:
        ap.error("--reps: at least 20 (docs/conventions.md, 'Measurement')")

    if a.check_deps:
        torch, why = have_torch()
        print(f"PyTorch {torch.__version__}: SDPA baselines (flash, cudnn)" if torch else why)
        ok, why = have_matplotlib()
        print("matplotlib: bench.png" if ok else why)
        return 0
    if a.show:
        for path in a.show:
            print(f"-- {path}\n{show(fp.read_csv(path))}")
        return 0
    if a.plot_only:
        path = a.csv or os.path.join(fp.gpu_dir(), "bench.csv")
        if not os.path.exists(path):
            ap.error(f"no {path} (run bench.py on a GPU first)")
        png = a.png or os.path.join(os.path.dirname(os.path.abspath(path)), "bench.png")
        source = fp.rel(os.path.abspath(path)) if os.path.abspath(path).startswith(fp.ROOT) else os.path.basename(path)
        return 0 if draw(fp.read_csv(path), png, source) else 1

    inputs = ("uniform", "randn") if a.inputs == "both" else (a.inputs,)
    committed = os.path.join(fp.gpu_dir(), "bench.csv")
    if "randn" in inputs and (not a.out or os.path.abspath(a.out) == committed):
        ap.error(f"--inputs {a.inputs}: give --out, not {fp.rel(committed)}: the generated tables (results.py) read "
                 "its rows as the uniform sweep's and do not tell randn rows apart")
    only = {s.strip()[:2].zfill(2) for s in a.steps.split(",")} if a.steps else set()
    exes = [] if a.no_steps else step_exes(a.build, only)
    if not exes and not a.no_steps:
        say(f"no step executable in {a.build}/bin" + (f" matching --steps {a.steps}" if only else "") +
            " (build first: cmake --preset default && cmake --build build)")
    device, tensor_peak = device_info(exes[0]) if exes else ("", -1.0)
    torch, why = have_torch() if not a.no_sdpa else (None, "")
    if torch:
        if tensor_peak <= 0:
            built = step_exes(a.build, set())
            device, tensor_peak = device_info(built[0]) if built else (device, -1.0)
        modes = "fwd" if a.gqa_only else auto_sdpa_modes(a.sdpa_modes, bool(only), list(map(has_backward, exes)))
        # --steps naming decode steps alone (22, 23): only the decode baselines. SDPA's rows of the other
        # problems belong to the run that measured the steps beside them, and --merge must keep those.
        decode_only = bool(only) and only <= DECODE_STEPS and a.sdpa_modes == "auto"
    # SDPA's attention rows are measured twice, before and after the steps, and the rows hold the mean
    # (bracket_mean): the steps' sweep takes minutes, and the GPU's clocks drift over them.
    bracket = bool(torch and exes and not a.gqa_only and not decode_only)
    if bracket:
        say(f"== SDPA baselines, first pass (PyTorch {torch.__version__}; rows: {modes})")
        before = sdpa_rows(torch, tensor_peak, a.reps, a.warmup, modes, inputs=inputs)
    # What is measured so far, after every step command, in OUT.partial (removed once OUT is written): a run cut
    # short (a device call's time limit) keeps its steps' rows and SDPA's first pass, not merged, not averaged.
    out = a.out or os.path.join(fp.gpu_dir(fp.gpu_slug(device or "unknown")), "bench.csv")
    partial = out + ".partial"
    rows, failed = step_rows(exes, a.gqa_only, inputs, only_variants=set(a.variants.split(",")) if a.variants else None,
                             progress=lambda got: write_csv(partial, got + (before if bracket else [])))
    sdpa_measured = False
    if not a.no_sdpa:
        if torch:
            if not a.gqa_only and not decode_only:
                say(f"== SDPA baselines{', second pass' if bracket else ''} (PyTorch {torch.__version__}; rows: {modes})")
                after = sdpa_rows(torch, tensor_peak, a.reps, a.warmup, modes, inputs=inputs)
                rows += bracket_mean(before, after)[0] if bracket else after
            if not a.gqa_only and modes in ("all", "fwd") and (not only or only & DECODE_STEPS):  # the decode baselines
                say("== SDPA baselines, decoding (step 22's shapes)")
                rows += sdpa_decode_rows(torch, a.reps, a.warmup, inputs)
            if modes in ("all", "fwd") and not decode_only:  # the forward baselines: also grouped-query attention's
                say(f"== SDPA baselines, grouped-query attention ({GQA_KV_HEADS} K/V heads, forward)")
                rows += sdpa_rows(torch, tensor_peak, a.reps, a.warmup, "fwd", kv_heads=GQA_KV_HEADS, inputs=inputs)
            sdpa_measured = True
        else:
            say(why)
    if not rows:
        say("nothing measured: no step ran and no baseline could run")
        return 1
    device = device or next((r["device"] for r in rows if r.get("device")), "unknown")
    if a.merge:
        rows, kept = merge_rows(fp.read_csv(a.merge), rows, by_problem=a.gqa_only)
        say(f"merged: {kept} rows kept from {a.merge}")
        if exes and not sdpa_measured:
            say("note: the SDPA rows come from the earlier run in " + a.merge + ", not from this one: the ratios of "
                "the re-measured steps to SDPA would mix two runs (re-measure without --no-sdpa)")
    out = a.out or os.path.join(fp.gpu_dir(fp.gpu_slug(device)), "bench.csv")
    write_csv(out, rows)
    if os.path.exists(partial):
        os.remove(partial)
    print(show(rows))
    say(f"wrote {out} ({len(rows)} rows)")
    if not a.no_plot:
        draw(rows, a.png or os.path.join(os.path.dirname(os.path.abspath(out)), "bench.png"), "bench.csv")
    if not a.no_render and os.path.abspath(out) == os.path.join(fp.gpu_dir(), "bench.csv"):
        import results
        results.render(check=False)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
