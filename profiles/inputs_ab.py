#!/usr/bin/env python3
"""profiles/inputs_ab.py: why is a kernel slower on standard normal inputs than on uniform ones? Uniform and randn
inputs in interleaved rounds, with the GPU's SM clock and power sampled while each arm runs.

    python3 profiles/inputs_ab.py --out inputs_ab.csv              # the default cells, ~4 minutes on an H100
    python3 profiles/inputs_ab.py --dry-run                        # the plan and its estimated time, no GPU
    python3 profiles/inputs_ab.py --step build/bin/19_hopper_pingpong_overlap --step build/bin/11_tuned_forward \\
        --dims 128 --seqs 16384 --causal no --dtypes f16 --rounds 4 --out ab.csv

Implementations: each --step executable (default build/bin/19_hopper_pingpong_overlap), run as
`EXE --bench --csv --inputs uniform|randn` on the cell (profiles/knob_ab.py's run_arm), which also times the
step it is checked against (its PREV, e.g. 17) on the same inputs: that row is kept too, under the PREV's name;
and PyTorch's SDPA forward, FlashAttention-2 and cuDNN backends (--sdpa), timed as profiles/bench.py times
them (its median_ms: CUDA events, L2 flushed before each repetition), inputs drawn as bench.py draws them
(torch.rand in [-0.5, 1.5), or torch.randn). Cells: the FlashAttention-2 benchmark shapes (batch·seq = 16384,
heads = 2048/d) of --dims × --seqs × --causal × --dtypes. Each cell runs --rounds rounds; in a round every
implementation runs uniform then randn (randn first in every other round), so a drift of the clocks falls on both
inputs alike. Repetitions: at least --reps, and enough for --arm-ms of timed launches at an assumed
500 TFLOP/s, so that every arm spans many clock samples. Nothing on the GPU is set or changed: the clocks and
power are only read.

Sampling: `nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw.instant,temperature.gpu -lms N` in the
background (power.draw where the driver has no instant reading: that one is averaged over about a second), or
pynvml where nvidia-smi is missing; without either the clock columns stay empty and the run says so. An arm's
samples are those stamped within its window; of those, the busy ones (power at least halfway from the idle power,
read before the first arm, to the window's highest) give its means, so that a step executable's set-up (the
inputs drawn on the CPU, the device opened) does not dilute them; its busy samples include its PREV's launches and
the device's copy-bandwidth measurement, which run in the same process.

CSV (--out, appended to): round, cell, impl, inputs, problem (as the implementation names it), time_ms (median),
tflops (FlashAttention's FLOP convention), clock_mhz, power_w, temp_c (means of the busy samples), samples (busy
of all), flop_per_cycle (FLOP / (time × SM clock): the work done per clock cycle, whole GPU), sampler, device.

Summary printed last: per cell and implementation, TFLOP/s, clock and power for uniform and randn (medians over
the rounds) and randn over uniform of time, clock and FLOP per cycle; then per implementation the medians of
those ratios over the cells. Reading it: randn slower through the clock (cause a: more power, lower clocks) shows
as time ratio ≈ 1 / clock ratio with FLOP/cycle ratio ≈ 1; randn slower through the kernel's own work (cause b:
e.g. more rescales of O as row maxima move) shows as FLOP/cycle ratio < 1 at an unchanged clock. If neither moves
here but another harness saw randn slower, look at the harnesses (cause c: timing, L2 flush).
"""
import argparse
import csv
import datetime
import math
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402  (SDPA timing and its inputs)
import fa_profiles as fp  # noqa: E402
import knob_ab  # noqa: E402  (the cells and one step run per arm)

COLUMNS = ["round", "cell", "impl", "inputs", "problem", "time_ms", "tflops", "clock_mhz", "power_w", "temp_c",
           "samples", "flop_per_cycle", "sampler", "device"]
ASSUMED_TFLOPS = 500.0  # for the repetitions an arm needs (--arm-ms), not for any result
SDPA = {"flash": ("sdpa_flash", "FLASH_ATTENTION"), "cudnn": ("sdpa_cudnn", "CUDNN_ATTENTION")}


def parse_args(argv=None):
    ap = argparse.ArgumentParser(prog="inputs_ab.py", description=__doc__.split("\n\n")[0],
                                 epilog=__doc__.split("\n\n", 1)[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--step", action="append", metavar="EXE",
                    help="a step executable (repeatable; default build/bin/19_hopper_pingpong_overlap)")
    ap.add_argument("--no-steps", action="store_true", help="SDPA only")
    ap.add_argument("--sdpa", nargs="*", choices=sorted(SDPA), default=["flash", "cudnn"],
                    help="SDPA backends (default: flash cudnn; none: no SDPA)")
    ap.add_argument("--dims", type=int, nargs="+", default=[128, 64])
    ap.add_argument("--seqs", type=int, nargs="+", default=[16384, 4096])
    ap.add_argument("--causal", choices=("yes", "no", "both"), default="both")
    ap.add_argument("--dtypes", nargs="+", choices=("f16", "bf16"), default=["f16", "bf16"])
    ap.add_argument("--rounds", type=int, default=2, help="rounds per cell (default 2; randn first in even rounds)")
    ap.add_argument("--reps", type=int, default=20, help="timed repetitions per arm, at least (default 20)")
    ap.add_argument("--warmup", type=int, default=3, help="untimed launches before each arm (default 3)")
    ap.add_argument("--arm-ms", type=float, default=500.0,
                    help="timed launches of each arm last about this long at least (default 500 ms)")
    ap.add_argument("--sample-ms", type=int, default=20, help="clock/power sampling period (default 20 ms)")
    ap.add_argument("--device", type=int, default=0, help="the CUDA device (and nvidia-smi -i) index")
    ap.add_argument("--out", default="inputs_ab.csv", help="CSV to append the arms to (default inputs_ab.csv)")
    ap.add_argument("--dry-run", action="store_true", help="print the plan and its estimated time; run nothing")
    a = ap.parse_args(argv)
    if a.rounds < 1 or a.reps < 20 or a.sample_ms < 1 or a.arm_ms < 0:
        ap.error("--rounds at least 1, --reps at least 20 (docs/conventions.md, 'Measurement'), --sample-ms at least 1")
    if a.no_steps and not a.sdpa:
        ap.error("nothing to run: --no-steps and no --sdpa backend")
    if a.no_steps:
        a.step = []
    elif not a.step:
        a.step = [os.path.join(fp.ROOT, "build", "bin", "19_hopper_pingpong_overlap")]
    return a


# ---- the plan -------------------------------------------------------------------------------------
def cell_name(cell):
    """(d, causal, seq, dtype) -> the executables' problem name, 'B1 H16 S16384 D128 causal f16'."""
    d, causal, seq, dtype = cell
    return f"B{knob_ab.TOKENS // seq} H{2048 // d} S{seq} D{d}{' causal' if causal else ''} {dtype}"


def cell_flop(cell):
    d, causal, seq, _ = cell
    return 4.0 * (knob_ab.TOKENS // seq) * (2048 // d) * seq * seq * d / (2.0 if causal else 1.0)


def arm_reps(cell, reps, arm_ms):
    """Repetitions for about arm_ms of timed launches at ASSUMED_TFLOPS, and at least `reps`."""
    est_ms = cell_flop(cell) / (ASSUMED_TFLOPS * 1e12) * 1e3
    return max(reps, math.ceil(arm_ms / est_ms))


def input_order(rnd):
    """Round 1, 3, ...: uniform then randn; round 2, 4, ...: randn then uniform."""
    return ("uniform", "randn") if rnd % 2 else ("randn", "uniform")


def plan(a):
    """Every arm in run order: (cell, round, impl kind 'step'/'sdpa', exe or backend key, inputs)."""
    impls = [("step", exe) for exe in a.step] + [("sdpa", b) for b in a.sdpa]
    return [(cell, rnd, kind, what, x) for cell in knob_ab.cells(a) for rnd in range(1, a.rounds + 1)
            for kind, what in impls for x in input_order(rnd)]


def estimate_s(a, arms):
    """A rough wall time: each arm's timed launches (twice for a step: its PREV too) plus set-up (a step
    executable: ~1.5 s to open the device, measure its copy bandwidth and draw the inputs; SDPA: ~0.1 s)."""
    total = 0.0
    for cell, _, kind, _, _ in arms:
        timed = arm_reps(cell, a.reps, a.arm_ms) * cell_flop(cell) / (ASSUMED_TFLOPS * 1e12)
        total += 2 * timed + 1.5 if kind == "step" else timed + 0.1
    return total


# ---- clock and power samples --------------------------------------------------------------------
def parse_smi_line(line):
    """'2026/11/27 07:00:05.123, 1980, 650.12, 55' -> (epoch seconds, MHz, W, °C), or None ([N/A], a header)."""
    parts = [p.strip() for p in line.split(",")]
    if len(parts) != 4:
        return None
    try:
        t = datetime.datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
        return t, float(parts[1]), float(parts[2]), float(parts[3])
    except ValueError:
        return None


class Sampler:
    """Clock/power samples (t, MHz, W, °C) in the background: nvidia-smi, else pynvml, else none (`note` says)."""

    def __init__(self, device, period_ms):
        self.device, self.period_ms = device, period_ms
        self.samples, self.source, self.note = [], "", ""
        self._proc = self._thread = None
        self._stop = threading.Event()

    def start(self):
        smi = shutil.which("nvidia-smi")
        if smi:
            power = "power.draw.instant" if self._smi_has(smi, "power.draw.instant") else "power.draw"
            cmd = [smi, f"--query-gpu=timestamp,clocks.sm,{power},temperature.gpu", "--format=csv,noheader,nounits",
                   "-lms", str(self.period_ms), "-i", str(self.device)]
            if shutil.which("stdbuf"):
                cmd = ["stdbuf", "-oL"] + cmd
            self._proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            self._thread = threading.Thread(target=self._read_smi, daemon=True)
            self.source = f"nvidia-smi {power}"
        else:
            try:
                import pynvml
                pynvml.nvmlInit()
                self._nvml = (pynvml, pynvml.nvmlDeviceGetHandleByIndex(self.device))
            except Exception as e:  # noqa: BLE001  (pynvml missing, or no driver)
                self.note = f"no clock/power samples: nvidia-smi not on PATH and pynvml unusable ({e})"
                return self
            self._thread = threading.Thread(target=self._poll_nvml, daemon=True)
            self.source = "pynvml"
        self._thread.start()
        return self

    @staticmethod
    def _smi_has(smi, field):
        p = subprocess.run([smi, f"--query-gpu={field}", "--format=csv,noheader,nounits"], stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL, text=True)
        return p.returncode == 0 and fp.to_float(p.stdout.splitlines()[0] if p.stdout else "") is not None

    def _read_smi(self):
        for line in self._proc.stdout:
            s = parse_smi_line(line)
            if s:
                self.samples.append(s)

    def _poll_nvml(self):
        nv, h = self._nvml
        while not self._stop.is_set():
            try:
                self.samples.append((time.time(), float(nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)),
                                     nv.nvmlDeviceGetPowerUsage(h) / 1000.0,
                                     float(nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU))))
            except Exception:  # noqa: BLE001  (a failed read: skip the sample)
                pass
            time.sleep(self.period_ms / 1000.0)

    def stop(self, settle_s=0.5):
        time.sleep(settle_s)  # the last arm's samples
        self._stop.set()
        if self._proc:
            self._proc.terminate()
            self._proc.wait()
        if self._thread:
            self._thread.join(timeout=5)
        self.samples.sort()
        return self


def idle_power(samples, t_end):
    """The median power of the samples before t_end (taken before the first arm), or None."""
    p = [s[2] for s in samples if s[0] < t_end]
    return statistics.median(p) if p else None


def window_means(samples, t0, t1, idle_w=None):
    """Means of MHz, W, °C over the busy samples stamped within [t0, t1]: power at least halfway from idle_w to the
    window's highest (all of them without idle_w). -> (mhz, watts, celsius, 'busy/all'), Nones without samples."""
    inside = [s for s in samples if t0 <= s[0] <= t1]
    if not inside:
        return None, None, None, "0/0"
    cut = idle_w + 0.5 * (max(s[2] for s in inside) - idle_w) if idle_w is not None else -math.inf
    busy = [s for s in inside if s[2] >= cut] or inside
    return (statistics.fmean(s[1] for s in busy), statistics.fmean(s[2] for s in busy),
            statistics.fmean(s[3] for s in busy), f"{len(busy)}/{len(inside)}")


def flop_per_cycle(flop, time_ms, mhz):
    """FLOP per SM clock cycle (whole GPU): time × clock cancels a clock effect, so this moves only with the work."""
    return flop / (time_ms * 1e-3 * mhz * 1e6) if time_ms and mhz else None


# ---- the runs -------------------------------------------------------------------------------------
def run_step(exe, cell, x, reps, warmup):
    """-> [(impl, problem, time_ms)]: the step's forward row, and its PREV's time from the same row."""
    row = knob_ab.run_arm(exe, {}, cell, True, ["--inputs", x, "--reps", str(reps), "--warmup", str(warmup)])
    out = [(row["step"], row["problem"], float(row["time_ms"]))]
    if row.get("prev_step") and (fp.to_float(row.get("prev_time_ms")) or -1) > 0:
        out.append((row["prev_step"], row["problem"], float(row["prev_time_ms"])))
    return out, row.get("device", "")


def run_sdpa(torch, key, cell, x, reps, warmup, flush, refused):
    """-> [(impl, problem, time_ms)] of SDPA's forward under backend `key`, or [] where it refuses the cell."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    d, causal, seq, dtype = cell
    name, backend = SDPA[key]
    t = {"f16": torch.float16, "bf16": torch.bfloat16}[dtype]
    shape = (knob_ab.TOKENS // seq, 2048 // d, seq, d)
    q, k, v = (bench.draw_input(torch, shape, t, x, -0.5, 1.5).requires_grad_() for _ in range(3))
    times = bench.under_backend(sdpa_kernel, getattr(SDPBackend, backend), name, cell_name(cell), refused,
                                lambda: bench.time_sdpa(torch, q, k, v, None, causal, flush, reps, warmup, bwd=False))
    return [(name, fp.with_inputs(cell_name(cell), x), times[0])] if times else []


def measure(a, arms, sampler, log=print):
    """Runs every arm; -> records (dicts of COLUMNS, clocks filled in later by add_clocks) with t0, t1."""
    torch = None
    if any(kind == "sdpa" for _, _, kind, _, _ in arms):
        torch, why = bench.have_torch()
        if not torch:
            log(f"note: {why}")
            arms = [arm for arm in arms if arm[2] != "sdpa"]
    flush = bench.flush_buffer(torch) if torch else None
    device = torch.cuda.get_device_name(a.device) if torch else ""
    records, refused = [], set()
    for i, (cell, rnd, kind, what, x) in enumerate(arms):
        reps = arm_reps(cell, a.reps, a.arm_ms)
        t0 = time.time()
        if kind == "step":
            got, device = run_step(what, cell, x, reps, a.warmup)
        else:
            got = run_sdpa(torch, what, cell, x, reps, a.warmup, flush, refused)
        t1 = time.time()
        for impl, problem, ms in got:
            records.append(dict(round=rnd, cell=cell_name(cell), impl=impl, inputs=x, problem=problem,
                                time_ms=ms, tflops=cell_flop(cell) / (ms * 1e-3) * 1e-12, flop=cell_flop(cell),
                                t0=t0, t1=t1, device=device))
        log(f"  [{i + 1}/{len(arms)}] {cell_name(cell)} round {rnd} {os.path.basename(str(what))} {x}: " +
            ", ".join(f"{impl} {ms:.3f} ms" for impl, _, ms in got))
    return records


def add_clocks(records, samples, idle_w, source):
    for r in records:
        mhz, watts, temp, n = window_means(samples, r["t0"], r["t1"], idle_w)
        r.update(clock_mhz=mhz, power_w=watts, temp_c=temp, samples=n, sampler=source,
                 flop_per_cycle=flop_per_cycle(r["flop"], r["time_ms"], mhz))
    return records


def write_records(path, records):
    new = not os.path.exists(path)
    with open(path, "a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore", lineterminator="\n")
        if new:
            w.writeheader()
        for r in records:
            w.writerow({k: (f"{v:.6g}" if isinstance(v, float) else ("" if v is None else v)) for k, v in r.items()})


# ---- the summary ----------------------------------------------------------------------------------
def _median(values):
    v = [x for x in values if x is not None]
    return statistics.median(v) if v else None


def summarize(records):
    """-> one dict per (cell, impl), in first-seen order: uniform and randn medians over the rounds of time_ms,
    tflops, clock_mhz, power_w, flop_per_cycle (keys like 'tflops_uniform'), and randn over uniform of time,
    clock and FLOP per cycle ('time_ratio', 'clock_ratio', 'fpc_ratio'; None where a side is missing)."""
    out = {}
    for r in records:
        s = out.setdefault((r["cell"], r["impl"]), dict(cell=r["cell"], impl=r["impl"], runs={}))
        s["runs"].setdefault(r["inputs"], []).append(r)
    for s in out.values():
        for x in fp.INPUTS:
            for key in ("time_ms", "tflops", "clock_mhz", "power_w", "flop_per_cycle"):
                s[f"{key}_{x}"] = _median(r.get(key) for r in s["runs"].get(x, []))

        def ratio(key):
            u, r = s[f"{key}_uniform"], s[f"{key}_randn"]
            return r / u if u and r else None
        s.update(time_ratio=ratio("time_ms"), clock_ratio=ratio("clock_mhz"), fpc_ratio=ratio("flop_per_cycle"))
        del s["runs"]
    return list(out.values())


def overall(summary):
    """-> {impl: (median time ratio, median clock ratio, median FLOP/cycle ratio, cells)} over the cells."""
    impls = dict.fromkeys(s["impl"] for s in summary)
    return {i: tuple(_median(s[k] for s in summary if s["impl"] == i) for k in ("time_ratio", "clock_ratio", "fpc_ratio"))
            + (sum(s["impl"] == i for s in summary),) for i in impls}


def _f(v, fmt):
    return "-" if v is None else fmt.format(v)


def format_summary(summary):
    body = [[s["cell"], s["impl"], _f(s["tflops_uniform"], "{:.1f}"), _f(s["tflops_randn"], "{:.1f}"),
             _f(s["time_ratio"], "{:.3f}"), _f(s["clock_mhz_uniform"], "{:.0f}"), _f(s["clock_mhz_randn"], "{:.0f}"),
             _f(s["clock_ratio"], "{:.3f}"), _f(s["power_w_uniform"], "{:.0f}"), _f(s["power_w_randn"], "{:.0f}"),
             _f(s["fpc_ratio"], "{:.3f}")] for s in summary]
    text = fp.text_table(["cell", "impl", "TFLOP/s unif", "TFLOP/s randn", "time r/u", "MHz unif", "MHz randn",
                          "MHz r/u", "W unif", "W randn", "FLOP/cyc r/u"], body, left=2)
    lines = [text, "medians over the cells, randn over uniform (time > 1: randn slower; FLOP/cycle < 1: the kernel "
                   "does more per FLOP on randn; clock < 1: the GPU clocks lower on randn):"]
    for impl, (t, c, f, n) in overall(summary).items():
        lines.append(f"SUMMARY {impl}: time {_f(t, '{:.3f}')}, clock {_f(c, '{:.3f}')}, FLOP/cycle {_f(f, '{:.3f}')} "
                     f"over {n} cells")
    return "\n".join(lines)


def main(argv=None):
    a = parse_args(argv)
    arms = plan(a)
    n_cells = len(list(knob_ab.cells(a)))
    print(f"inputs_ab: {n_cells} cells x {a.rounds} rounds x {len(a.step) + len(a.sdpa)} implementations x 2 inputs "
          f"= {len(arms)} arms, about {estimate_s(a, arms) / 60:.1f} minutes")
    if a.dry_run:
        for cell, rnd, kind, what, x in arms[:2 * (len(a.step) + len(a.sdpa))]:
            print(f"  {cell_name(cell)} round {rnd}: {kind} {os.path.basename(str(what))} {x}, "
                  f"{arm_reps(cell, a.reps, a.arm_ms)} reps")
        print("  ... (every cell alike)")
        return 0
    for exe in a.step:
        if not os.access(exe, os.X_OK):
            raise SystemExit(f"inputs_ab: no executable {exe} (build it, or --no-steps)")
    sampler = Sampler(a.device, a.sample_ms).start()
    if sampler.note:
        print(f"note: {sampler.note}")
    time.sleep(1.0)  # idle samples: the power the busy threshold starts from
    t_idle = time.time()
    try:
        records = measure(a, arms, sampler)
    finally:
        sampler.stop()
    idle_w = idle_power(sampler.samples, t_idle)
    print(f"sampler: {sampler.source or 'none'}, {len(sampler.samples)} samples, idle power "
          f"{_f(idle_w, '{:.0f}')} W")
    add_clocks(records, sampler.samples, idle_w, sampler.source)
    write_records(a.out, records)
    print(f"wrote {a.out}: {len(records)} rows")
    print(format_summary(summarize(records)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
