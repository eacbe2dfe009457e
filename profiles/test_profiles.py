#!/usr/bin/env python3
"""CPU tests of the profiles/ tools (python3 -m unittest profiles/test_profiles.py, or run directly).

No GPU and no Nsight Compute: capture.sh runs against a mock `ncu` and mock step executables in a
scratch copy of the tree, which exercises its shell logic (shapes, --bwd detection, metrics that ncu
refuses, a failing shape) and the raw-CSV -> metrics.csv conversion end to end.
"""
import contextlib
import csv
import gzip
import io
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import textwrap
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import fa_profiles as fp  # noqa: E402

# A mock ncu: profiles by running the app and saving what was asked; exports a raw CSV in ncu's
# layout (header, units, one row per kernel) with units that need converting and an 'n/a'.
MOCK_NCU = r'''#!/usr/bin/env python3
import json, os, subprocess, sys
a = sys.argv[1:]
if a == ["--version"]:
    print("NVIDIA (R) Nsight Compute Command Line Profiler\nVersion 2025.3.1.0 (mock)")
    sys.exit(0)
if "-i" in a:
    rep = json.load(open(a[a.index("-i") + 1]))
    if "details" in a:
        print("  Section: GPU Speed Of Light Throughput\n    Duration   us   1.23")
        sys.exit(0)
    kernels = ["void step04::sgemm<0, 4, 4, step04::Tile<128, 128, 256, 2>>(const float *, float *, int)",
               "void step04::softmax_rows<4>(const float *, float *, float *, int)"] \
        if "04_" in rep["exe"] else ["void step01::softmax_rows<4>(const float *, float *, float *, int)"]
    metrics = rep["metrics"] + ["smsp__average_warps_issue_stalled_gmma_per_issue_active.ratio"]
    units = {"gpu__time_duration.sum": "nsecond", "dram__bytes_read.sum": "byte", "dram__bytes_write.sum": "Mbyte",
             "launch__shared_mem_per_block_static": "Kbyte", "launch__shared_mem_per_block_dynamic": "byte",
             "launch__registers_per_thread": "register/thread"}
    def value(m, k):
        if m == "gpu__time_duration.sum": return "1,234,567" if k == 0 else "765,433"
        if m == "dram__bytes_read.sum": return "1,073,741,824"
        if m == "dram__bytes_write.sum": return "2.5"
        if m == "launch__shared_mem_per_block_static": return "48"
        if m == "launch__shared_mem_per_block_dynamic": return "16384"
        if m == "launch__registers_per_thread": return "128"
        if m == "l1tex__t_sector_hit_rate.pct": return "n/a"
        if m == "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active": return "10"
        if m == "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active": return "12.5"
        if "stalled" in m:
            reason = m.split("stalled_")[1].split("_per_issue")[0]
            return {"long_scoreboard": "9", "selected": "20", "barrier": "3", "wait": "4", "gmma": "5"}.get(reason, "0.5")
        return "50"
    head = ["ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream", "Block Size",
            "Grid Size", "Device", "CC"] + metrics
    q = lambda row: ",".join('"%s"' % c for c in row)
    print(q(head))
    print(q([""] * 11 + [units.get(m, "%" if "pct" in m else "") for m in metrics]))
    for k, name in enumerate(kernels):
        print(q([str(k), "1", "x", "h", name, "1", "7", "(256, 1, 1)", "(132, 4, 1)", "0", "9.0"] +
                [value(m, k) for m in metrics]))
    sys.exit(0)
if os.environ.get("MOCK_NCU_LOG"):
    open(os.environ["MOCK_NCU_LOG"], "a").write(" ".join(a) + "\n")
if "--kernel-name" in a and os.environ.get("MOCK_NCU_NO_MATCH"):
    print("==WARNING== No kernels were profiled.")
    sys.exit(0)
metrics = a[a.index("--metrics") + 1].split(",") if "--metrics" in a else []
bad = "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active"
if metrics and os.environ.get("MOCK_NCU_ANONYMOUS"):
    print("==ERROR== the metrics list is not valid")
    sys.exit(1)
if bad in metrics:
    print("==ERROR== Failed to find metric " + bad)
    sys.exit(1)
rep = a[a.index("-o") + 1]
app = a[a.index("-o") + 2:]
rc = subprocess.run(app).returncode
if rc == 0:
    json.dump({"exe": app[0], "args": app[1:], "metrics": metrics}, open(rep + ".ncu-rep", "w"))
sys.exit(rc)
'''

# A mock step executable: --device-info names an H100; only 04_ has a backward; --oom fails.
MOCK_STEP = r'''#!/usr/bin/env bash
name=$(basename "$0")
case " $* " in
  *" --bwd --device-info "*) [[ $name == 04_* ]] && exit 0; echo "error: $name has no backward pass"; exit 2 ;;
  *" --device-info "*) echo "device 0: NVIDIA H100 80GB HBM3 (sm_90, 132 SMs, 1.98 GHz)"; exit 0 ;;
  *" --oom "*) echo "error: out of memory" >&2; exit 1 ;;
esac
exit 0
'''


def write_exe(path, text):
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


class RawCsv(unittest.TestCase):
    RAW = textwrap.dedent('''\
        ==PROF== Disconnected
        "ID","Process ID","Kernel Name","Block Size","Grid Size","gpu__time_duration.sum","dram__bytes_read.sum","l1tex__t_sector_hit_rate.pct","smsp__average_warps_issue_stalled_wait_per_issue_active.ratio","smsp__average_warps_issue_stalled_selected_per_issue_active.ratio"
        "","","","","","usecond","Gbyte","%","",""
        "0","1","void step05::flash_fwd<64>(const float *)","(128, 1, 1)","(32, 128, 1)","2,500.5","1.5","n/a","7.5","1"
        ''')

    def test_units_and_missing(self):
        recs = fp.parse_raw_csv(self.RAW)
        self.assertEqual(len(recs), 1)
        row = fp.panel_row("05_flash_forward", "--seq 64", recs[0])
        self.assertEqual(row["kernel"], "flash_fwd<64>")
        self.assertAlmostEqual(row["time_us"], 2500.5)
        self.assertAlmostEqual(row["dram_read_mb"], 1500.0)
        self.assertEqual(row["l1_hit_pct"], "")  # n/a: empty, not zero
        self.assertEqual(row["fma_pct"], "")  # not collected: empty
        self.assertEqual((row["stall1"], row["stall1_cpi"]), ("wait", 7.5))  # 'selected' is no stall
        self.assertEqual(row["stall2"], "")
        self.assertAlmostEqual(row["stall_total_cpi"], 8.5)
        self.assertEqual((row["grid"], row["block"]), ("32x128x1", "128x1x1"))

    def test_no_header(self):
        self.assertEqual(fp.parse_raw_csv("==ERROR== nothing profiled\n"), [])

    def test_helpers(self):
        self.assertEqual(fp.gpu_slug("NVIDIA H100 80GB HBM3"), "h100")
        self.assertEqual(fp.gpu_slug("NVIDIA H200"), "h200")
        self.assertEqual(fp.gpu_slug("NVIDIA A100-SXM4-80GB"), "a100")
        self.assertEqual(fp.gpu_slug("Some Future GPU"), "some_future_gpu")
        self.assertEqual(fp.shape_label("--batch 4 --heads 32 --seq 4096 --head-dim 64 --causal --bwd"),
                         "B4 H32 S4096 D64 causal bwd")
        self.assertEqual(fp.shape_label("--size 4096 --layout nn"), "4096x4096x4096 NN")
        p = fp.split_problem("B8 H32 S2048 D64 causal bf16 fwd+bwd")
        self.assertEqual((p["shape"], p["dtype"], p["mode"], p["seq"]), ("B8 H32 S2048 D64 causal", "bf16", "fwd+bwd", 2048))
        self.assertEqual(fp.split_problem("B4 H32 S4096 D64 f32")["mode"], "fwd")
        self.assertIsNone(fp.split_problem("4096x4096"))
        # grouped-query attention: only when asked for, so that the MHA tables never mix it in
        self.assertIsNone(fp.split_problem("B8 H32 KV8 S2048 D64 f16"))
        g = fp.split_problem("B8 H32 KV8 S2048 D64 causal bf16", gqa=True)
        self.assertEqual((g["heads"], g["kv_heads"], g["seq"], g["causal"], g["shape"]),
                         (32, 8, 2048, True, "B8 H32 KV8 S2048 D64 causal"))
        self.assertEqual(fp.split_problem("B8 H32 S2048 D64 f16", gqa=True)["kv_heads"], 32)
        # a KV cache (step 22): likewise only when asked for
        self.assertIsNone(fp.split_problem("B8 H32 KV8 Sq1 Sk4096 D128 cache f16", gqa=True))
        c = fp.split_problem("B8 H32 KV8 Sq1 Sk4096 D128 cache causal f16", gqa=True, cache=True)
        self.assertEqual((c["kv_heads"], c["seq"], c["seq_k"], c["cache"], c["causal"]), (8, 1, 4096, True, True))
        self.assertEqual(fp.fmt_delta(100.0, 67.0, "size"), ("-33.0", "-33%"))
        self.assertEqual(fp.fmt_delta(32.0, 32.0, "int"), ("0", "0%"))

    def test_aggregate(self):
        rows = [dict(time_us="300", dram_read_mb="10", sm_pct="90", regs="32", stall_total_cpi="10",
                     stall1="wait", stall1_cpi="6"),
                dict(time_us="100", dram_read_mb="5", sm_pct="10", regs="64", stall_total_cpi="20",
                     stall1="barrier", stall1_cpi="12")]
        a = fp.aggregate(rows)
        self.assertEqual((a["time_us"], a["dram_read_mb"], a["regs"]), (400.0, 15.0, 64.0))
        self.assertAlmostEqual(a["sm_pct"], 70.0)  # weighted by duration
        self.assertAlmostEqual(a["stall_total_cpi"], 12.5)
        self.assertEqual([name for _, name in a["stalls"]], ["wait", "barrier"])


class Capture(unittest.TestCase):
    """capture.sh against a mock ncu and mock steps in a scratch tree."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="capture_test_")
        os.makedirs(os.path.join(self.tmp, "profiles"))
        for f in ("capture.sh", "fa_profiles.py"):
            shutil.copy(os.path.join(HERE, f), os.path.join(self.tmp, "profiles", f))
        with open(os.path.join(self.tmp, "profiles", "ncu_shapes.txt"), "w") as f:
            f.write("# test shapes\n01_mock --rows 64 --cols 4096\n01_mock --rows 1 --cols 1 --oom\n"
                    "01_mock --rows 2 --cols 2 --bwd\n04_mock --batch 1 --heads 2 --seq 128 --head-dim 64\n"
                    "04_mock --batch 1 --heads 2 --seq 128 --head-dim 64 --bwd\n")
        bindir = os.path.join(self.tmp, "build", "bin")
        os.makedirs(bindir)
        for step in ("01_mock", "04_mock"):
            write_exe(os.path.join(bindir, step), MOCK_STEP)
        self.mockbin = os.path.join(self.tmp, "mockbin")
        os.makedirs(self.mockbin)
        write_exe(os.path.join(self.mockbin, "ncu"), MOCK_NCU.replace("#!/usr/bin/env python3", "#!" + sys.executable))

    def tearDown(self):
        shutil.rmtree(self.tmp)

    def run_capture(self, *args, **extra_env):
        env = dict(os.environ, PATH=self.mockbin + os.pathsep + os.environ["PATH"], PYTHON=sys.executable, **extra_env)
        return subprocess.run(["bash", os.path.join(self.tmp, "profiles", "capture.sh"), *args], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def test_capture(self):
        p = self.run_capture("--no-build", "1", "04_mock")
        out = p.stdout
        self.assertEqual(p.returncode, 1, out)  # the --oom shape failed; the others are written
        self.assertIn("dropped", out)
        self.assertIn("skipped (01_mock has no backward pass)", out)
        self.assertIn("FAILED", out)
        d = os.path.join(self.tmp, "profiles", "h100")
        with open(os.path.join(d, "01_mock", "metrics.csv")) as f:
            rows = list(csv.DictReader(f))
        self.assertEqual(len(rows), 1)
        r = rows[0]
        self.assertEqual(r["problem"], "64x4096")
        self.assertEqual(r["kernel"], "softmax_rows<4>")
        self.assertAlmostEqual(float(r["time_us"]), 1234.567)
        self.assertAlmostEqual(float(r["dram_read_mb"]), 1073.741824)
        self.assertAlmostEqual(float(r["dram_write_mb"]), 2.5)
        self.assertAlmostEqual(float(r["smem_static_kb"]), 48.0)
        self.assertAlmostEqual(float(r["smem_dynamic_kb"]), 16.384)
        self.assertEqual(r["regs"], "128")
        self.assertEqual(r["l1_hit_pct"], "")
        self.assertAlmostEqual(float(r["tensor_pct"]), 12.5)  # the largest of the tensor-pipe metrics it had
        self.assertEqual([r["stall1"], r["stall2"], r["stall3"]], ["long_scoreboard", "gmma", "wait"])
        with open(os.path.join(d, "04_mock", "metrics.csv")) as f:
            rows = list(csv.DictReader(f))
        self.assertEqual([(x["problem"], x["kernel"]) for x in rows],
                         [("B1 H2 S128 D64", "sgemm<0, 4, 4, Tile<128, 128, 256, 2>>"), ("B1 H2 S128 D64", "softmax_rows<4>"),
                          ("B1 H2 S128 D64 bwd", "sgemm<0, 4, 4, Tile<128, 128, 256, 2>>"),
                          ("B1 H2 S128 D64 bwd", "softmax_rows<4>")])
        with open(os.path.join(d, "04_mock", "speed_of_light.txt")) as f:
            sol = f.read()
        self.assertIn("## B1 H2 S128 D64 bwd", sol)
        self.assertIn("Speed Of Light", sol)
        self.assertTrue(os.path.exists(os.path.join(d, "04_mock", "ncu_raw.csv")))

    def test_metrics_refused_without_a_name(self):
        p = self.run_capture("--no-build", "04", MOCK_NCU_ANONYMOUS="1")
        self.assertEqual(p.returncode, 0, p.stdout)
        self.assertIn("refused the --metrics list without naming a metric", p.stdout)
        with open(os.path.join(self.tmp, "profiles", "h100", "04_mock", "metrics.csv")) as f:
            rows = list(csv.DictReader(f))
        self.assertEqual(len(rows), 4)
        self.assertEqual(rows[0]["time_us"], "")  # the mock's sections carry nothing else

    def test_usage(self):
        self.assertEqual(self.run_capture().returncode, 2)
        self.assertEqual(self.run_capture("--bogus").returncode, 2)
        p = self.run_capture("--no-build", "99")
        self.assertEqual(p.returncode, 2)
        self.assertIn("no step '99'", p.stdout)
        self.assertIn("profiles/capture.sh", self.run_capture("--help").stdout)


    def test_kernel_filter(self):
        with open(os.path.join(self.tmp, "profiles", "ncu_shapes.txt"), "w") as f:
            f.write("04_mock kernels=step04:: --batch 1 --heads 2 --seq 128 --head-dim 64 --dtype f16\n")
        log = os.path.join(self.tmp, "ncu_calls.txt")
        p = self.run_capture("--no-build", "04", MOCK_NCU_LOG=log)
        self.assertEqual(p.returncode, 0, p.stdout)
        self.assertIn("(kernels matching step04::)", p.stdout)
        with open(log) as f:
            self.assertIn("--kernel-name-base demangled --kernel-name regex:step04::", f.read())
        with open(os.path.join(self.tmp, "profiles", "h100", "04_mock", "metrics.csv")) as f:
            rows = list(csv.DictReader(f))
        self.assertEqual(rows[0]["shape"], "--batch 1 --heads 2 --seq 128 --head-dim 64 --dtype f16")  # no kernels=
        self.assertEqual(rows[0]["problem"], "B1 H2 S128 D64 f16")
        p = self.run_capture("--no-build", "04", MOCK_NCU_NO_MATCH="1")  # the filter matches nothing: all kernels
        self.assertEqual(p.returncode, 0, p.stdout)
        self.assertIn("no kernel matched", p.stdout)


class ShapesAndMoved(unittest.TestCase):
    def test_kernels_and_paired_shapes(self):
        with tempfile.TemporaryDirectory() as d:
            shapes, moved = os.path.join(d, "shapes.txt"), os.path.join(d, "moved.txt")
            with open(shapes, "w") as f:
                f.write("# c\n06_x --seq 8 --causal\n09_y kernels=step09:: --seq 8  --causal --dtype f16\n")
            with open(moved, "w") as f:
                f.write("09_y | 06_x | --seq 8 --causal => --seq 8 --causal --dtype f16 | tensor_pct | S8 f16\n"
                        "06_x | - | --seq 8 --causal | - | -\n")
            self.assertEqual(fp.read_shapes(shapes), [("06_x", "--seq 8 --causal"),
                                                      ("09_y", "--seq 8 --causal --dtype f16")])
            self.assertEqual(fp.kernel_filter("09_y", "--seq 8 --causal --dtype  f16", shapes), "step09::")
            self.assertEqual(fp.kernel_filter("06_x", "--seq 8 --causal", shapes), "")
            m = fp.read_moved(moved)
            self.assertEqual((m[0]["prev_shape"], m[0]["shape"]), ("--seq 8 --causal", "--seq 8 --causal --dtype f16"))
            self.assertEqual(m[1]["prev_shape"], m[1]["shape"])


SASS_DUMP = """
\tcode for sm_90a
\t\tFunction : _Z6kernelPf
\t.headerflags    @"EF_CUDA_SM90"
        /*0000*/                   FFMA R10, R2.reuse, R4, R6 ;                  /* 0x0000000402 */
                                                                                 /* 0x000fe20000 */
        /*0010*/                   FFMA R11, R2, R5, R8 ;
        /*0020*/                   FFMA R12, R3, R5, R8 ;
        /*0030*/                   LDS.128 R20, [R1+0x10] ;
        /*0040*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;
        /*0050*/              @P0  FFMA R13, R1, c[0x0][0x10], R9 ;
\t\tFunction : _Z5otherv
        /*0000*/                   EXIT ;
"""
SOURCE_HEAD = ('"Address","Source","# Samples","Instructions Executed","stall_dispatch","stall_selected",'
               '"stall_short_sb","stall_lg","stall_dispatch (Not Issued)"')


def source_block(kernel, rows):
    """ncu --page source --csv for one kernel: (sass, samples, executed, dispatch, selected, short_sb, lg)."""
    lines = [f'"Kernel Name","{kernel}",', SOURCE_HEAD]
    lines += [",".join(f'"{x}"' for x in (hex(16 * i), sass, *vals, 999)) for i, (sass, *vals) in enumerate(rows)]
    return "\n".join(lines)


class SourceStalls(unittest.TestCase):
    ROWS = [("FFMA R10, R2, R4, R6", 10, 100, 4, 3, 1, 0),   # R2, R4, R6 read: one parity
            ("FFMA R11, R2, R5, R8", 5, 100, 0, 3, 0, 0),    # R2 from the reuse cache; R5, R8: other
            ("FFMA R12, R3, R5, R8", 7, 100, 2, 3, 2, 0),    # three reads: two share a parity
            ("LDS.128 R20, [R1+0x10]", 3, 50, 1, 1, 0, 0),
            ("BAR.SYNC.DEFER_BLOCKING 0x0", 2, 50, 0, 1, 0, 0),
            ("@P0 FFMA R13, R1, c[0x0][0x10], R9", 4, 40, 1, 1, 0, 2)]  # R1, R9 (the constant is no read)

    def test_shape_lines(self):
        with tempfile.TemporaryDirectory() as d:
            shapes = os.path.join(d, "shapes.txt")
            with open(shapes, "w") as f:
                f.write("07_x source --seq 8 --bwd\n07_x --seq 8 --causal --bwd\n09_y kernels=k:: source --seq 8\n")
            self.assertEqual(fp.read_shapes(shapes), [("07_x", "--seq 8 --bwd"), ("07_x", "--seq 8 --causal --bwd"),
                                                      ("09_y", "--seq 8")])
            self.assertTrue(fp.wants_source("07_x", "--seq  8 --bwd", shapes))
            self.assertFalse(fp.wants_source("07_x", "--seq 8 --causal --bwd", shapes))
            self.assertTrue(fp.wants_source("09_y", "--seq 8", shapes))
            self.assertEqual(fp.kernel_filter("09_y", "--seq 8", shapes), "k::")

    def test_groups(self):
        funcs = fp.parse_cuobjdump(SASS_DUMP)
        self.assertEqual(len(funcs["_Z6kernelPf"]), 6)
        self.assertEqual(funcs["_Z6kernelPf"][0], "FFMA R10, R2.reuse, R4, R6")
        cached, groups = {}, []
        for ins in funcs["_Z6kernelPf"]:
            g, cached = fp.instruction_group(ins, cached)
            groups.append(g)
        one, other = fp.SOURCE_GROUPS[0], fp.SOURCE_GROUPS[1]
        self.assertEqual(groups, [one, other, one, "LDS", "other", one])

    def test_capture_reduction(self):
        kernel = "void step07::backward_dq<(int)128>(const float *, float *)"
        text = "\n".join([source_block(kernel, self.ROWS), source_block(kernel, self.ROWS),  # listed twice
                          source_block("void nomatch()", self.ROWS[:2])])
        with tempfile.TemporaryDirectory() as d:
            work, out = os.path.join(d, "work"), os.path.join(d, "out", "07_x")
            os.makedirs(work)
            for name, body in (("000.flags", "--seq 8 --bwd\n"), ("000.source.csv", text), ("sass.txt", SASS_DUMP)):
                with open(os.path.join(work, name), "w") as f:
                    f.write(body)
            self.assertEqual(fp.build_source_capture(work, out), 0)
            with open(os.path.join(out, "source_stalls.csv")) as f:
                rows = list(csv.DictReader(f))
        self.assertEqual([r["group"] for r in rows], fp.SOURCE_GROUPS)  # once, not twice; nomatch skipped
        self.assertEqual({(r["kernel"], r["shape"]) for r in rows}, {("backward_dq<128>", "--seq 8 --bwd")})
        g = {r["group"]: r for r in rows}
        one = g[fp.SOURCE_GROUPS[0]]
        self.assertEqual((one["inst"], one["samples"], one["dispatch"], one["selected"], one["short_sb"], one["other"]),
                         ("240", "21", "7", "7", "3", "2"))  # rows 1, 3, 6; lg -> other; (Not Issued) ignored
        self.assertEqual((g[fp.SOURCE_GROUPS[1]]["inst"], g["LDS"]["samples"], g["other"]["inst"]), ("100", "3", "50"))

    def test_no_sass(self):
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "000.source.csv"), "w") as f:
                f.write(source_block("k", self.ROWS))
            self.assertEqual(fp.build_source_capture(d, os.path.join(d, "out")), 1)  # no cuobjdump SASS
            os.makedirs(os.path.join(d, "empty"))
            self.assertEqual(fp.build_source_capture(os.path.join(d, "empty"), os.path.join(d, "out")), 0)  # no source
            self.assertFalse(os.path.exists(os.path.join(d, "out")))

    def test_table(self):
        import results
        kernel = "void step07::backward_dq<(int)128>(const float *, float *)"
        with tempfile.TemporaryDirectory() as d:
            work, out = os.path.join(d, "work"), os.path.join(d, "07_flash_backward")
            os.makedirs(work)
            for name, body in (("000.flags", "--batch 1 --heads 2 --seq 8 --head-dim 128 --bwd\n"),
                               ("000.source.csv", source_block(kernel, self.ROWS)), ("sass.txt", SASS_DUMP)):
                with open(os.path.join(work, name), "w") as f:
                    f.write(body)
            self.assertEqual(fp.build_source_capture(work, out), 0)
            saved = results.gpu_dir
            results.gpu_dir = lambda gpu=None: d
            try:
                table = results.bwd_banks_table()
                missing = results.bwd_banks_table("99_none")
            finally:
                results.gpu_dir = saved
        row = next(l for l in table.splitlines() if "backward_dq<128>" in l)
        # FFMA 340 of 440 instructions; one parity 240 of 340; dispatch per FFMA 7/240 over 0/100: no ratio;
        # 7 of 8 dispatch stalls; samples 31: selected 12, dispatch 8, short_sb 3
        self.assertEqual([c.strip() for c in row.strip("|").split("|")],
                         ["07", "B1 H2 S8 D128 bwd", "backward_dq<128>", "77", "71%", "-", "88%", "39 / 26 / 10"])
        self.assertIn("No `profiles/", missing)


def bench_row(step, problem, ms):
    return dict(step=step, idea="synthetic", problem=problem, time_ms=str(ms), rate="1", unit="TFLOP/s",
                pct_peak="1", peak="tensor", peak_value="989", prev_step="", prev_time_ms="-1",
                speedup_vs_prev="-1", err_vs_prev="-1", check="", baseline="", baseline_time_ms="-1",
                vs_baseline="-1", device="Synthetic GPU")


class PythonVersions(unittest.TestCase):
    """What results.py prints must not depend on the Python version that renders it."""

    def test_mean_is_exactly_rounded(self):
        import results
        # Ten 0.1s: builtin sum() gives 0.9999999999999999 before Python 3.12 and 1.0 from 3.12 on.
        self.assertEqual(results.mean([0.1] * 10), 0.1)


class TensorCoreTables(unittest.TestCase):
    """results.py's tc_* blocks on synthetic rows (written to a scratch CSV, never to profiles/<gpu>/)."""

    def setUp(self):
        import results
        self.results = results
        self.tmp = tempfile.mkdtemp(prefix="tc_tables_")
        self.csv = os.path.join(self.tmp, "bench.csv")

    def tearDown(self):
        self.results.BENCH_OVERRIDE = None
        shutil.rmtree(self.tmp)

    def write(self, rows):
        with open(self.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=fp.BENCH_COLUMNS, lineterminator="\n")
            w.writeheader()
            w.writerows(rows)
        self.results.BENCH_OVERRIDE = self.csv

    def sweep(self, step, ms, skip=(), slow=()):
        rows = []
        for dt in ("f16", "bf16"):
            for d in (64, 128):
                for causal in (False, True):
                    for seq in (512, 1024, 2048, 4096, 8192, 16384):
                        cell = (dt, d, causal, seq)
                        if cell in skip:
                            continue
                        shape = f"B{16384 // seq} H{2048 // d} S{seq} D{d}" + (" causal" if causal else "")
                        rows.append(bench_row(step, f"{shape} {dt}", ms * (1.25 if cell in slow else 1.0)))
                        if step.startswith("sdpa"):  # a baseline's backward rows must not count
                            rows.append(bench_row(step, f"{shape} {dt} bwd", 0.001))
        return rows

    def test_bought_compares_each_cell_with_the_prev_timed_beside_it(self):
        rows = [dict(r, prev_step="14_backward_dq_accumulator", prev_time_ms="2.0")
                for r in self.sweep("15_backward_causal_order", 1.0)]
        for r in rows:  # the backward rows count, the forward ones (made above) do not
            r["problem"] += " bwd"
        rows[5]["prev_time_ms"] = "1.0"  # one cell no faster
        self.write(rows + [dict(rows[1], problem=rows[1]["problem"] + " [deterministic]", time_ms="4.0")])
        table = self.results.bought_table("15")
        self.assertIn("| f16 | 64 | - | 2.00× | 2.00× | 2.00× | 2.00× | 1.00× |", table)
        self.assertIn("Median over the 40 cells with seq ≥ 1024: 2.00× (from 1.00× to 2.00×)", table)
        self.assertIn("| 0.50× |", self.results.bought_table("15", "deterministic"))
        self.assertIn("Not measured yet", self.results.bought_table("13"))

    def test_variant_price_is_the_default_time_over_the_variant_time(self):
        rows = [dict(r, problem=r["problem"] + " bwd") for r in self.sweep("26_hopper_backward_lean_softmax", 1.0)]
        det = [dict(r, problem=r["problem"] + " [deterministic]", time_ms="1.25") for r in rows]
        det[2]["time_ms"] = "1.0"  # one cell (f16 d 64, seq 2048) as fast as the default
        self.write(rows + det + [dict(rows[0], problem=rows[0]["problem"] + " [mask-every-tile]", time_ms="9")])
        table = self.results.variant_price_table("26", "deterministic")
        self.assertIn("| f16 | 64 | - | 0.80× | 1.00× | 0.80× | 0.80× | 0.80× |", table)
        self.assertIn("median 0.80×, from 0.80× to 1.00×, 39 below 0.85×", table)
        self.assertIn("Not measured yet", self.results.variant_price_table("26", "no-such-variant"))

    def test_published_backward_sits_beside_the_measured_rows(self):
        rows = [dict(r, problem=r["problem"] + " bwd", rate="600") for r in self.sweep("26_hopper_backward_lean_softmax", 1.0)]
        self.write(rows + [dict(r, problem=r["problem"] + " bwd", rate="500") for r in self.sweep("sdpa_cudnn", 1.0)])
        table = self.results.published_bwd_table()
        self.assertIn(f"| 16384 | {self.results.FA3_BWD_D128[16384]} | {self.results.FA3_BWD_CUDNN_D128[16384]} "
                      "| 600 | 600 | 500 | 500 |", table)
        self.write(rows[:1])  # no SDPA rows: a dash, not a number
        self.assertIn("| - | - |", self.results.published_bwd_table())

    def test_sass_mix_counts_per_exponential_by_opcode_group(self):
        head = ["Address", "Source", "Warp Stall Sampling (All Samples)", "Instructions Executed"]
        folder = os.path.join(self.tmp, "26_hopper_backward_lean_softmax", "sass")
        os.makedirs(folder)
        for step, n in (("25", 3), ("26", 1)):  # 25: three FSETPs per exponential, 26: one
            for d in (64, 128):
                with gzip.open(os.path.join(folder, f"{step}_d{d}.csv.gz"), "wt", newline="") as f:
                    w = csv.writer(f)
                    w.writerow(["Kernel Name", "k"])
                    w.writerow(head)
                    w.writerow(["0x0", "  MUFU.EX2 R1, R2", "10", "100"])
                    w.writerow(["0x1", "  @!P0  FSETP.GEU.AND P1, PT, R3, -126, PT", "30", str(100 * n)])
                    w.writerow(["0x2", "  BAR.SYNC.DEFER_BLOCKING 0x0", "60", "100"])  # in no group
        real = self.results.gpu_dir
        self.results.gpu_dir = lambda gpu=None: self.tmp
        try:
            table = self.results.sass_mix_table()
        finally:
            self.results.gpu_dir = real
        self.assertIn("| tests and selects (FSETP, ISETP, PLOP3, FSEL, SEL) | 3.00 (30%) | 1.00 (30%) | 3.00 (30%) | 1.00 (30%) |",
                      table)
        self.assertIn("| every instruction | 5.00 (100%) | 3.00 (100%) | 5.00 (100%) | 3.00 (100%) |", table)
        self.assertIn("| MUFU.EX2 | 1.00 (10%) |", table)

    def test_gqa_table_reads_only_grouped_rows(self):
        gqa = [dict(r, problem=r["problem"].replace(" S", " KV8 S", 1)) for r in
               self.sweep("19_hopper_pingpong_overlap", 1.0) + self.sweep("sdpa_cudnn", 1.25)]
        self.write(self.sweep("19_hopper_pingpong_overlap", 9.0) + gqa)  # the MHA rows must not count
        table = self.results.gqa_table()
        self.assertIn("| median × SDPA-cuDNN (GQA), seq ≥ 1024 | ≥ 1.00× | 1.25× over 40 cells | **met** |", table)
        self.assertIn("d 64: 32 query heads, 8 K/V heads", table)
        self.assertNotIn("| 9", table.split("\n\n")[0])  # the per-cell rows: GQA only
        self.assertIn("| × step 19 on MHA (its own run) | 40 | 9.00× | 9.00× | 9.00× |", table)

    def test_decode_table(self):
        shape = "B1 H32 KV8 Sq1 Sk131072 D128 cache f16"  # 537 MB of K/V: above the L2
        self.write([dict(bench_row("22_split_kv_decode", shape, 0.2), rate="2700", pct_peak="90", unit="GB/s"),
                    dict(bench_row("sdpa_flash", shape, 0.25), unit="GB/s"),
                    dict(bench_row("sdpa_cudnn", shape, 0.19), unit="GB/s"),
                    bench_row("22_split_kv_decode", "B1 H32 S2048 D128 f16", 0.1)])  # not a decode row
        table = self.results.decode_table()
        self.assertIn("| 1 | 8 | 131072 | 537 | 200.0 | 2700 | 90% | 1.25× | 0.95× | - |", table)
        self.assertIn("lowest 0.95×; 1 of 1 below", table)
        self.assertIn("| % of the copy bandwidth, K/V bytes > 50 MB | ≥ 85% | lowest 90%; 0 of 1 below | **met** |", table)
        self.assertIn("each backend on one allocation of its inputs", table)
        self.write([dict(bench_row("22_split_kv_decode", shape, 0.2), unit="GB/s"),
                    dict(bench_row("sdpa_cudnn", shape, 0.19), unit="GB/s",
                         idea="PyTorch 2 SDPA, cuDNN backend, fastest of 3 allocations of its inputs")])
        self.assertIn("each backend's fastest over 3 allocations of its inputs", self.results.decode_table())

    def test_decode_table_keeps_uniform_and_randn_rows_apart(self):
        shape = "B1 H32 KV8 Sq1 Sk131072 D128 cache f16"
        self.write([dict(bench_row("22_split_kv_decode", shape, 0.2), rate="2700", pct_peak="90", unit="GB/s"),
                    dict(bench_row("sdpa_cudnn", shape, 0.19), unit="GB/s"),
                    dict(bench_row("22_split_kv_decode", shape + " randn", 0.25), rate="2100", pct_peak="70", unit="GB/s"),
                    dict(bench_row("sdpa_cudnn", shape + " randn", 0.3), unit="GB/s")])
        uniform, randn = self.results.decode_table(), self.results.decode_table("randn")
        self.assertIn("| 1 | 8 | 131072 | 537 | 200.0 | 2700 | 90% | - | 0.95× | - |", uniform)
        self.assertIn("| 1 | 8 | 131072 | 537 | 250.0 | 2100 | 70% | - | 1.20× | - |", randn)
        self.assertNotIn("250.0", uniform)
        self.assertIn("drawn standard normal (randn)", randn)
        self.write([dict(bench_row("22_split_kv_decode", shape, 0.2), rate="2700", pct_peak="90", unit="GB/s")])
        self.assertIn("Not measured yet (no step 22 rows on randn inputs", self.results.decode_table("randn"))

    def test_decode_table_reads_the_named_gpus_bench_csv(self):
        shape = "B1 H32 KV8 Sq1 Sk131072 D128 cache f16"
        self.write([dict(bench_row("22_split_kv_decode", shape + " randn", 0.25), rate="2100", pct_peak="70",
                         unit="GB/s")])
        self.results.BENCH_OVERRIDE = None  # read from the GPU's folder, as a history's block does
        saved = self.results.gpu_dir
        self.results.gpu_dir = lambda gpu=None: self.tmp if gpu == "h200" else os.path.join(self.tmp, "none")
        try:
            h200, default = self.results.decode_table("randn", "h200"), self.results.decode_table("randn")
        finally:
            self.results.gpu_dir = saved
        self.assertIn("| 1 | 8 | 131072 | 537 | 250.0 | 2100 | 70% | - | - | - |", h200)
        self.assertIn("from `profiles/h200/bench.csv`", h200)
        self.assertIn("Not measured yet", default)

    def test_inputs_ab_table_medians_per_input_and_their_ratio(self):
        path = os.path.join(self.tmp, "ab.csv")
        with open(path, "w", newline="") as f:
            w = csv.writer(f, lineterminator="\n")
            w.writerow(["round", "who", "shape", "inputs", "time_ms", "device"])
            for rnd, (u, r) in enumerate(((0.017, 0.015), (0.015, 0.015), (0.016, 0.014))):
                w.writerow([rnd, "sdpa_cudnn", "B1 KV1", "uniform", u, "GPU"])
                w.writerow([rnd, "sdpa_cudnn", "B1 KV1", "randn", r, "GPU"])
                w.writerow([rnd, "22", "B1 KV1", "uniform", 0.02, "GPU"])  # no randn row: left out
        saved = self.results.gpu_dir
        self.results.gpu_dir = lambda gpu=None: self.tmp
        try:
            table = self.results.inputs_ab_table("ab.csv")
            missing = self.results.inputs_ab_table("none.csv")
        finally:
            self.results.gpu_dir = saved
        self.assertIn("| B1 KV1 | SDPA-cuDNN | 16.0 (15.0-17.0) | 15.0 (14.0-15.0) | 0.938× |", table)
        self.assertNotIn("| step 22 |", table)
        self.assertIn("3 rounds", table)
        self.assertIn("Not measured yet", missing)

    def test_step22_headline_from_the_bench_sweep_without_run_all(self):
        shape = self.results.HEADLINE_BENCH["22"]
        self.write([dict(bench_row("22_split_kv_decode", shape, 0.08), rate="1800", pct_peak="60", unit="GB/s",
                         peak="copy"),
                    dict(bench_row("sdpa_cudnn", shape, 0.06), unit="GB/s"),
                    bench_row("22_split_kv_decode", shape.replace("Sk4096", "Sk1024"), 0.01)])  # another shape
        saved = self.results.gpu_dir
        self.results.gpu_dir = lambda gpu=None: self.tmp  # a GPU folder with no run_all.csv
        try:
            line = self.results.step_headline("22")
            missing = self.results.step_headline("18")
        finally:
            self.results.gpu_dir = saved
        self.assertEqual(line, f"**Headline** (H100, `bench.py`, {shape}): 1800 GB/s (60% of copy) in 0.08 ms; "
                               "0.75× SDPA-cuDNN at this shape (their time over this step's, bench.csv).")
        self.assertIn("not measured yet", missing)

    def test_not_measured(self):
        self.write(self.sweep("sdpa_flash", 1.0) + self.sweep("sdpa_cudnn", 0.5))
        target = self.results.tc_target_block()
        self.assertIn("not measured yet (no step 11 rows", target)
        self.assertIn("From `" + self.csv, target)
        table = self.results.tc_vs_sdpa_table()
        self.assertIn("Not measured yet: steps 09, 10, 11 have no rows", table)
        self.assertEqual(table.count("\n| f16 |") + table.count("\n| bf16 |"), 48)
        self.assertIn("not measured yet", self.results.tc_climb_table())

    def test_pass_fail_and_ratios(self):
        slow = {("bf16", 128, True, 1024)}
        rows = self.sweep("sdpa_flash", 1.0) + self.sweep("sdpa_cudnn", 0.5) + \
            self.sweep("09_tensor_core_forward", 2.0) + self.sweep("11_tuned_forward", 0.9, slow=slow)
        self.write(rows)
        target = self.results.tc_target_block()
        self.assertIn("**not met**: 1 of 40 measured cells below 1.0× (worst 0.888× at bf16 d128 causal seq 1024)", target)
        self.assertIn("| bf16 | 128 | yes | 0.888× ✗ | 1.111× ✓ |", target)
        table = self.results.tc_vs_sdpa_table()
        # f16 d64 not causal seq 512: SDPA 1.0 ms -> 4·16384·512·2048 / 1e-3 = 68.7 TFLOP/s; 09 at 2 ms; 10 missing
        self.assertIn("| f16 | 64 | no | 512 | 68.7 | 137.4 | 34.4 | 0.50× | 0.25× | - | - | - | 76.4 | 1.11× | 0.56× |", table)
        self.assertIn("Not measured yet: step 10 has no rows", table)
        climb = self.results.tc_climb_table()
        self.assertIn("| 11_tuned_forward | bf16 | 20 of 20 | 0.89× / 1.11× / 1.11× | 19 of 20 | 0.44× / 0.56× / 0.56× |",
                      climb)
        self.assertIn("| 10_swizzle_pipeline_forward | f16 | 0 of 20 | not measured yet |", climb)
        only09 = self.results.blocks_of("docs/09_x.md", "<!-- results:tc_vs_sdpa:09:begin -->")
        self.assertNotIn("10 TFLOP/s", only09["results:tc_vs_sdpa:09"]())

    def test_hopper_forward_table(self):
        # step 17 at 0.5 ms with step 11 (its interleaved prev) at 0.7 ms: 1.40× step 11; cuDNN at 0.4 ms: 0.80×
        rows = self.sweep("sdpa_flash", 1.0) + self.sweep("sdpa_cudnn", 0.4) + self.sweep("17_hopper_forward", 0.5)
        for r in rows:
            if r["step"] == "17_hopper_forward":
                r["prev_step"], r["prev_time_ms"] = "11_tuned_forward", "0.7"
        self.write(rows)
        table = self.results.hopper_fwd_table()
        self.assertIn("| f16 | 64 | no | 512 | 137.4 | 1.40× | 2.00× | 0.80× |", table)
        self.assertIn("| × step 11 | 40 | 1.40× | 1.40× | 1.40× | **met** (≥ 1.30×) |", table)
        self.assertIn("| × SDPA-cuDNN | 40 | 0.80× | 0.80× | 0.80× | **met** (≥ 0.75×) |", table)
        self.write(self.sweep("sdpa_cudnn", 0.3) + self.sweep("17_hopper_forward", 0.5))  # no prev: '-'
        table = self.results.hopper_fwd_table()
        self.assertIn("| × SDPA-cuDNN | 40 | 0.60× | 0.60× | 0.60× | **missed** (< 0.75×) |", table)
        self.assertIn("| × step 11 | 0 | - |", table)
        self.write(self.sweep("sdpa_flash", 1.0))
        self.assertIn("Not measured yet (no step 17 rows", self.results.hopper_fwd_table())
        self.assertIn("| 17_hopper_forward | f16 | 0 of 20 | not measured yet |", self.results.tc_climb_table())

    def test_warp_specialized_table(self):
        # step 19 at 0.5 ms, step 18 (its interleaved prev) at 0.6 ms; cuDNN at 0.55 ms (1.10×) but 0.4 ms (0.80×) in
        # one seq-2048 cell: median met, the every-cell target missed there
        rows = self.sweep("sdpa_flash", 1.0) + self.sweep("sdpa_cudnn", 0.55) + self.sweep(self.results.HOPPER_PP, 0.5)
        for r in rows:
            if r["step"] == self.results.HOPPER_PP:
                r["prev_step"], r["prev_time_ms"] = self.results.HOPPER_WS, "0.6"
            if r["step"] == "sdpa_cudnn" and r["problem"] == "B8 H32 S2048 D64 causal bf16":
                r["time_ms"] = "0.4"
        self.write(rows)
        table = self.results.hopper_ws_table()
        self.assertIn("| f16 | 64 | no | 512 | 137.4 | 1.20× | 2.00× | 1.10× |", table)
        self.assertIn("| × step 18 | 40 | 1.20× | 1.20× | 1.20× |", table)
        self.assertIn("| median × SDPA-cuDNN, seq ≥ 1024 | ≥ 1.00× | 1.10× over 40 cells | **met** |", table)
        self.assertIn("lowest 0.80× (bf16 d64 causal seq 2048); 1 of 32 below | **missed** |", table)
        # 4·16384·8192·2048 FLOP in 0.5 ms: 2199 TFLOP/s at d128 not causal seq 8192 (twice at 16384)
        self.assertIn("| ≥ 600 | lowest 2199 (bf16 d128 not causal seq 8192) | **met** |", table)
        # step 18's table: the same shape against step 17, without the targets (step 19 carries them)
        self.assertIn("Not measured yet (no step 18 rows", self.results.hopper_ws_table(self.results.HOPPER_WS))
        self.write(rows + [dict(r, step=self.results.HOPPER_WS, prev_step="17_hopper_forward")
                           for r in rows if r["step"] == self.results.HOPPER_PP])
        table = self.results.hopper_ws_table(self.results.HOPPER_WS)
        self.assertIn("| × step 17 | 40 | 1.20× | 1.20× | 1.20× |", table)
        self.assertNotIn("| target |", table)
        self.write(self.sweep("sdpa_cudnn", 0.3))
        self.assertIn("Not measured yet (no step 19 rows", self.results.hopper_ws_table())

    def test_ablation_table(self):
        pp, ws = self.results.HOPPER_PP, self.results.HOPPER_WS
        rows = self.sweep(pp, 0.5) + self.sweep(ws, 0.8) + self.sweep("17_hopper_forward", 1.0)
        self.write(rows)
        self.assertIn("Not measured yet (no rows of step 19's", self.results.hopper_ablation_table())
        rows.append(bench_row(pp, "B2 H16 S8192 D128 f16 [no-pingpong]", 0.55))
        rows.append(bench_row(pp, "B2 H16 S8192 D128 bf16 [no-overlap]", 0.1))  # bf16: not used
        rows.append(bench_row(ws, "B2 H16 S8192 D128 f16 [no-setmaxnreg]", 1.6))  # step 18's: not in step 19's table
        self.write(rows)
        table = self.results.hopper_ablation_table()
        # full at d128 seq 8192: 2199 TFLOP/s; no-pingpong 0.55 ms: 1999, the full step 10% faster; step 17 at 1.0 ms
        self.assertIn("| `no-pingpong` | ping-pong between the consumers | - | - | - | - | - | 1999 (+10%) | - | - |",
                      table)
        self.assertIn("| step 18 | both overlaps (step 18's own kernel, its sweep rows) | 344 (+60%) |", table)
        self.assertIn("| step 17 | warp specialisation and everything after it | 275 (+100%) |", table)
        self.assertIn("| `full` | nothing: the step as it is | ", table)
        self.assertIn("| `no-overlap` | S of the next tile issued before the softmax (intra-warpgroup) | - | - | - | -"
                      " | - | - | - | - |", table)
        self.assertNotIn("no-setmaxnreg", table)
        self.assertIn("| FlashAttention-3 | 661 | full | 2199 |", table)
        self.assertIn("| no GEMM-softmax pipelining, warp-specialised | 582 | no-overlap | - |", table)
        self.assertIn("| GEMM-softmax pipelining, no warp specialisation | 570 | step 17 | 1100 |", table)
        # step 18's own table: its variants against step 17, no FA3 comparison
        table = self.results.hopper_ablation_table(ws)
        self.assertIn("| `no-setmaxnreg` | the register reallocation (every thread capped at the launch's share) | - | - "
                      "| - | - | - | 687 (+100%) | - | - |", table)
        self.assertIn("| step 17 | warp specialisation and everything after it | 275 (+25%) |", table)
        self.assertNotIn("no-pingpong", table)
        self.assertNotIn("FlashAttention-3", table)

    def test_met_and_incomplete(self):
        base = self.sweep("sdpa_flash", 1.0)
        self.write(base + self.sweep("11_tuned_forward", 0.99))
        self.assertIn("**met** in all 40 cells (lowest 1.010×", self.results.tc_target_block())
        self.write(base + self.sweep("11_tuned_forward", 0.99, skip={("f16", 64, False, 2048)}))
        self.assertIn("incomplete: 39 of 40 cells measured", self.results.tc_target_block())


class GeneratedDocBlocks(unittest.TestCase):
    def test_snippet_quotes_the_lines_by_their_text_and_fails_when_it_is_gone(self):
        import results
        block = results.snippet_block("02", "__device__ MaxSum merge(MaxSum a, MaxSum b) {", 3)
        self.assertTrue(block.startswith("```cpp\n__device__ MaxSum merge(MaxSum a, MaxSum b) {\n"))
        self.assertIn("steps/02_online_softmax/kernel.cu), lines ", block)
        with self.assertRaises(SystemExit):
            results.snippet_block("02", "no such line in the kernel", 3)

    def test_figure_labels_are_what_another_matplotlib_is_checked_by(self):
        sys.path.insert(0, os.path.join(fp.ROOT, "tools"))
        import figures
        svg = '<g><text style="a" transform="t">04 f32</text><path d="M 0 0"/><text x="1">SDPA-FA2 f16 310</text></g>'
        self.assertEqual(figures.labels(svg), ["04 f32", "SDPA-FA2 f16 310"])
        self.assertNotEqual(figures.labels(svg), figures.labels(svg.replace("310", "311")))
        self.assertEqual(figures.labels(svg), figures.labels(svg.replace("M 0 0", "M 0 1")))  # paths: not compared

    def test_worked_examples_agree_with_the_direct_computation(self):
        sys.path.insert(0, os.path.join(fp.ROOT, "tools"))
        import worked_example as w
        self.assertIn("agree exactly", w.online_softmax_block())
        text = w.flash_tile_block()
        o = text.split("$O = o / l = ")[1].split("$")[0]
        direct = text.split("computed directly gives $")[1].split("$")[0]
        self.assertEqual(o, direct)  # the two-tile recurrence and softmax(s)·V print the same digits


class SassSummary(unittest.TestCase):
    """results.py's SASS import and its tables on synthetic cuobjdump text (never the committed file)."""
    K10 = "_ZN6step1010tc_forwardI6__halfLi64EEEvPKT_S4_S4_PS2_Pfiiifb"
    K11 = "_ZN6step1110tc_forwardI6__halfNS_3CfgILi64ELi4ELi1ELi64ELi3ELb1EEEEEvPKT_S6_S6_PS4_Pfiiifb"
    K11B = "_ZN6step1110tc_forwardI13__nv_bfloat16NS_3CfgILi128ELi4ELi2ELi64ELi2ELb0EEEEEvPKT_S6_S6_PS4_Pfiiifb"

    def setUp(self):
        import results
        self.results = results
        self.tmp = tempfile.mkdtemp(prefix="sass_")

    def tearDown(self):
        self.results.SASS_OVERRIDE = None
        shutil.rmtree(self.tmp)

    @staticmethod
    def listing(name, body):
        """cuobjdump's layout: a Function header, then one line per instruction with its address."""
        lines = [f"\t\tFunction : {name}", "\t.headerflags\t@\"EF_CUDA_SM90\""]
        for n, ins in enumerate(body):
            lines.append(f"        /*{16 * n:04x}*/                   {ins} ;   /* 0x0000000000000000 */")
            lines.append("                                                      /* 0x000fe20000000f00 */")
        return "\n".join(lines) + "\n"

    def test_demangle(self):
        d = self.results.demangle_short
        self.assertEqual(d("_ZN6step0112softmax_rowsILi4EEEvPKfPfi"), "step01::softmax_rows<4>")
        self.assertEqual(d("_ZN6step035sgemmEPKfS1_Pfiii"), "step03::sgemm")
        self.assertEqual(d(self.K10), "step10::tc_forward<__half, 64>")
        self.assertEqual(d(self.K11), "step11::tc_forward<__half, Cfg<64, 4, 1, 64, 3, true>>")
        self.assertEqual(d(self.K11B), "step11::tc_forward<__nv_bfloat16, Cfg<128, 4, 2, 64, 2, false>>")
        self.assertEqual(d("not_mangled"), "not_mangled")

    def test_counts_and_tables(self):
        import gzip
        body10 = ["LDGSTS.E.BYPASS.LTC128B.128 [R3], desc[UR4][R4.64]", "LDSM.16.M88.4 R8, [R2]",
                  "LDSM.16.MT88.4 R12, [R2+0x800]", "HMMA.16816.F32 R16, R8, R12, R16", "FMUL R1, R1, R2",
                  "FMUL.FTZ R3, R3, R4", "FFMA R5, R5, R6, -R7", "MUFU.EX2 R5, R5", "SHFL.BFLY PT, R6, R5, 0x1, 0x1f",
                  "BAR.SYNC.DEFER_BLOCKING 0x0", "STG.E desc[UR4][R2.64], R9"] + ["NOP"] * 4096 + \
                 ["HMMA.16816.F32 R20, R8, R14, R20"]  # past address 0xffff: /*10000*/ and up still count
        body11 = ["LDGSTS.E.BYPASS.LTC128B.128 [R3+0x1000], desc[UR4][R4.64+0x2000]", "LDSM.16.M88.4 R8, [R2]",
                  "HMMA.16816.F32 R16, R8, R12, R16", "HMMA.16816.F32 R20, R8, R14, R20", "STG.E.128 desc[UR4][R2.64], R8"]
        path = os.path.join(self.tmp, "sass.txt.gz")
        with gzip.open(path, "wt") as f:
            f.write("### build/steps/10/kernel.cu.o\n" + self.listing(self.K10, body10) +
                    "### build/steps/11/kernel.cu.o\n" + self.listing(self.K11, body11) + self.listing(self.K11B, ["NOP"]))
        k = self.results.summarize_sass(path)
        k10 = k["step10::tc_forward<__half, 64>"]
        self.assertEqual(k10["instructions"], len(body10))
        self.assertEqual((k10["hmma"], k10["ldsm"], k10["ldgsts"], k10["fmul"]), (2, 2, 1, 2))
        self.assertEqual((k10["mufu_ex2"], k10["shfl"], k10["bar"], k10["stg32"], k10["stg128"]), (1, 1, 1, 1, 0))
        k11 = k["step11::tc_forward<__half, Cfg<64, 4, 1, 64, 3, true>>"]
        self.assertEqual((k11["instructions"], k11["hmma"], k11["fmul"], k11["stg128"]), (5, 2, 0, 1))

        # New-format CSV (as import writes it) plus one row of the older nine columns: both render.
        csv_path = os.path.join(self.tmp, "sass_summary.csv")
        cols = [c for c, _ in self.results.SASS_COUNTS]
        with open(csv_path, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["kernel"] + cols)
            for name, counts in k.items():
                w.writerow([name] + [counts[c] for c in cols])
            w.writerow(["step01::softmax_rows<4>", 720, 12, 0, 4, 1, 32, 20, 4])  # an old row: no new columns
        self.results.SASS_OVERRIDE = csv_path
        old = self.results.sass_table(("step01::",))
        self.assertIn("| step01::softmax_rows<4> | 720 | 12 | 0 | 4 | 1 | 32 | 20 | 4 |", old)
        wide = self.results.sass_table(("step01::",), self.results.SASS_TC)
        self.assertIn("| step01::softmax_rows<4> | 720 | - | - | - | 12 | 4 | 1 | 32 | - | 20 | 4 |", wide)
        block = self.results.sass_tc_block()
        self.assertNotIn("__nv_bfloat16", block)  # fp16 instances only
        self.assertIn(f"| step10::tc_forward<__half, 64> | {len(body10)} | 2 | 2 | 1 | 0 | 0 | 1 | 1 | 2 | 1 | 1 |", block)
        self.assertIn(f"| 11 − 10 | {5 - len(body10):+d} | +0 | -1 | +0 | +0 | +1 | -1 | -1 | -2 | -1 | -1 |", block)

    def test_no_rows_yet(self):
        self.results.SASS_OVERRIDE = os.path.join(self.tmp, "missing.csv")
        self.assertIn("No SASS of steps 09-11", self.results.sass_tc_block())


class DecodeSplits(unittest.TestCase):
    """results.py's table of step 22's pinned split counts (synthetic rows in a scratch CSV)."""

    def test_table(self):
        import results
        tmp = tempfile.mkdtemp(prefix="splits_")
        try:
            path = os.path.join(tmp, "decode_splits.csv")
            results.SPLITS_OVERRIDE = path
            self.assertIn("Not measured yet", results.decode_splits_table())
            shape = "B1 H32 KV8 Sq1 Sk16384 D128 cache f16"
            rows = [dict(bench_row("22_split_kv_decode", shape, ms), splits=n, rate=str(rate), unit="GB/s")
                    for n, ms, rate in (("default", 0.05, 1400), ("1", 0.4, 170), ("2", 0.2, 340), ("8", 0.04, 1700))]
            with open(path, "w", newline="") as f:
                w = csv.DictWriter(f, fieldnames=["splits"] + fp.BENCH_COLUMNS, lineterminator="\n")
                w.writeheader()
                w.writerows(rows)
            table = results.decode_splits_table()
            # the heuristic's 0.05 ms against the fastest count's (8 splits, 0.04 ms): 1.25×
            self.assertIn(f"| {shape} | 1400 | 170 | 340 | **1700** | 1.25× |", table)
            rows += [dict(bench_row("22_split_kv_decode", shape, ms), splits=n, rate=str(rate), unit="GB/s")
                     for n, ms, rate in (("default/r16", 0.045, 1500), ("1/r16", 0.03, 2000))]
            with open(path, "w", newline="") as f:  # decode_splits.py --rows: a block's rows pinned too
                w = csv.DictWriter(f, fieldnames=["splits"] + fp.BENCH_COLUMNS, lineterminator="\n")
                w.writeheader()
                w.writerows(rows)
            table = results.decode_splits_table()
            self.assertIn("| 1 split | 2 splits | 8 splits | unpinned, rows 16 | 1 split, rows 16 |", table)
            self.assertIn(f"| {shape} | 1400 | 170 | 340 | 1700 | 1500 | **2000** | 1.67× |", table)
        finally:
            results.SPLITS_OVERRIDE = None
            shutil.rmtree(tmp)

    def test_rows_pinned_beside_the_splits(self):
        """decode_splits.py --rows: every count under each pinned block of rows, the executable seeing both
        variables (a fake step that writes them into its row), neither left set afterwards."""
        import decode_splits
        with tempfile.TemporaryDirectory() as tmp:
            os.makedirs(os.path.join(tmp, "bin"))
            exe = os.path.join(tmp, "bin", "22_split_kv_decode")
            with open(exe, "w") as f:
                f.write("#!/bin/sh\necho step,idea,problem,time_ms\n"
                        "echo \"22_split_kv_decode,x,s=${FA_STEP22_SPLITS:-none} r=${FA_STEP22_ROWS:-none},0.01\"\n")
            os.chmod(exe, 0o755)
            out = os.path.join(tmp, "out.csv")
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                decode_splits.main(["--build", tmp, "--shapes", "64:1:1024", "--splits", "1,2", "--rows", "16,32",
                                    "--out", out])
            with open(out, newline="") as f:
                got = [(r["splits"], r["problem"]) for r in csv.DictReader(f)]
            self.assertEqual(got, [("default/r16", "s=none r=16"), ("1/r16", "s=1 r=16"), ("2/r16", "s=2 r=16"),
                                   ("default/r32", "s=none r=32"), ("1/r32", "s=1 r=32"), ("2/r32", "s=2 r=32")])
            self.assertNotIn("FA_STEP22_ROWS", os.environ)
            self.assertNotIn("FA_STEP22_SPLITS", os.environ)


def history_table(test, name, csv_name, header, rows):
    """results.py's table `name` rendered against a scratch gpu_dir: first with no csv_name there (it must say
    "Not measured"), then with `rows` (dicts, missing columns empty) written to it under `header`."""
    import results
    with tempfile.TemporaryDirectory() as d:
        saved = results.gpu_dir
        results.gpu_dir = lambda gpu=None: d
        try:
            test.assertIn("Not measured", getattr(results, name)())
            path = os.path.join(d, getattr(results, csv_name))
            os.makedirs(os.path.dirname(path))
            with open(path, "w", newline="") as f:
                w = csv.DictWriter(f, fieldnames=header, restval="", lineterminator="\n")
                w.writeheader()
                w.writerows(rows)
            return getattr(results, name)()
        finally:
            results.gpu_dir = saved


def table_from_bench(name, rows):
    """results.py's table function `name` rendered against a scratch bench.csv holding `rows` (dicts, one set of keys)."""
    import results
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "bench.csv")
        with open(path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]), lineterminator="\n")
            w.writeheader()
            w.writerows(rows)
        results.BENCH_OVERRIDE = path
        try:
            return getattr(results, name)()
        finally:
            results.BENCH_OVERRIDE = None


class DqReduce(unittest.TestCase):
    """Doc 20's dq_reduce table (profiles/microbench/dq_reduce.cu's CSV) and the per-unit backward table."""

    def test_dq_reduce_table(self):
        import results
        header = ["method", "order", "dim", "heads", "seq", "bytes_added", "time_ms", "tb_per_s", "check"]
        rows = [dict(zip(header, ["rows8", "same", "128", "16", "16384", "1e9", "1.0", "1.000", "PASS"])),
                dict(zip(header, ["bulk", "staggered", "64", "16", "16384", "1e9", "0.5", "2.000", "FAIL"]))]
        with tempfile.TemporaryDirectory() as d:
            saved = results.gpu_dir
            results.gpu_dir = lambda gpu=None: d
            try:
                self.assertIn("Not measured", results.dq_reduce_table())
                with open(os.path.join(d, "dq_reduce.csv"), "w", newline="") as f:
                    w = csv.DictWriter(f, fieldnames=header, lineterminator="\n")
                    w.writeheader()
                    w.writerows(rows)
                table = results.dq_reduce_table()
            finally:
                results.gpu_dir = saved
        self.assertIn("| 8-byte atomics by rows (this step) | same | 128 | 1.00 | PASS |", table)
        self.assertIn("| bulk reduce from shared memory | staggered | 64 | 2.00 | FAIL |", table)
        self.assertIn("16 heads at seq 16384", table)

    def test_bwd_unit_table(self):
        # d 128: 128 key tiles × 256 query tiles × 16 heads = 524288 units; 524288 / 132 SMs per SM
        rows = [{"step": "20_hopper_backward", "problem": "B1 H16 S16384 D128 f16 bwd", "time_ms": "17.7",
                 "peak_value": "1071"}]
        table = table_from_bench("bwd_unit_table", rows)
        unit_us = 17.7e3 * 132 / 524288
        self.assertIn(f"| f16 | 128 | 20 | {unit_us:.2f} | 1.29 |", table)
        self.assertIn("| 32 |", table)  # 64 queries × 128 dims × 4 bytes of dQ per unit


class OneRunTables(unittest.TestCase):
    """Tables read from one raw bench.py CSV kept under profiles/<gpu>/: doc 27's targets (acceptance_table), doc
    20's targets carried to step 26 (carried_targets_table), and doc 22's read-only kernel (read_floor_table)."""

    HEAD = ["step", "problem", "time_ms", "prev_step", "prev_time_ms", "rate", "pct_peak"]

    def render(self, name, files, *args):
        import results
        with tempfile.TemporaryDirectory() as d:
            for rel, rows in files.items():
                os.makedirs(os.path.dirname(os.path.join(d, rel)), exist_ok=True)
                with open(os.path.join(d, rel), "w", newline="") as f:
                    w = csv.DictWriter(f, fieldnames=list(rows[0]), lineterminator="\n")
                    w.writeheader()
                    w.writerows(rows)
            saved = results.gpu_dir
            results.gpu_dir = lambda gpu=None: d
            try:
                return getattr(results, name)(*args)
            finally:
                results.gpu_dir = saved

    def row(self, step, problem, ms, prev_ms=-1, prev="26_hopper_backward_lean_softmax"):
        return dict(zip(self.HEAD, [step, problem, str(ms), prev if prev_ms > 0 else "", str(prev_ms), "1", "1"]))

    def test_acceptance_verdicts(self):
        s27, cell = "27_hopper_backward_deterministic", "B1 H16 S16384 D128 f16"
        rows = [self.row(s27, f"{cell} bwd", 5.0, 4.0), self.row("sdpa_cudnn", f"{cell} bwd", 4.4),
                self.row(s27, f"{cell} fwd+bwd", 7.0, 6.0), self.row("sdpa_cudnn", f"{cell} fwd+bwd", 5.4),
                self.row(s27, f"{cell} bwd randn", 4.2, 4.0), self.row("sdpa_cudnn", f"{cell} bwd randn", 4.4)]
        table = self.render("acceptance_table", {f"{s27}/raw.csv": rows}, "27", "raw.csv")
        self.assertIn("| uniform | step 26 bwd × SDPA-cuDNN | 1 | 1.10× | 1.10× | 0 | median ≥ 1.00×, none < 0.85× | met |",
                      table)
        self.assertIn("| uniform | step 26 fwd+bwd × SDPA-cuDNN | 1 | 0.90× | 0.90× | - | median ≥ 1.00× | **missed** |",
                      table)
        rate = 2.5 * 4 * 16384 * 16384 * 2048 / 4.0 / 1e9  # 550 at 4.0 ms: met
        self.assertIn(f"| uniform | step 26 bwd TFLOP/s, d 128, seq 16384, not causal | 1 | f16 {rate:.0f} | {rate:.0f} |",
                      table)
        self.assertIn("| uniform | step 27 (deterministic) × step 26 | 1 | 0.80× | 0.80× | 1 | none < 0.85× | **missed** |",
                      table)
        self.assertIn("| randn | step 27 (deterministic) × step 26 | 1 | 0.95× | 0.95× | 0 | none < 0.85× | met |", table)
        self.assertIn("Not measured", self.render("acceptance_table", {f"{s27}/raw.csv": rows}, "27", "other.csv"))

    def test_carried_targets(self):
        cell = "B2 H16 S8192 D128 causal bf16 bwd"
        rows = [self.row("16_deterministic_backward", cell, 3.0), self.row("26_hopper_backward_lean_softmax", cell, 2.0),
                self.row("sdpa_cudnn", cell, 2.4)]
        table = self.render("carried_targets_table", {"20_hopper_backward/raw.csv": rows}, "20", "raw.csv", "26", "16")
        self.assertIn("| bf16 | 128 | causal | 1.50× |", table)
        self.assertIn("| uniform | step 26 × step 16 | 1 | 1.50× | 1.50× | ≥ 1.30× | met |", table)
        self.assertIn("| uniform | step 26 × SDPA-cuDNN | 1 | 1.20× | 1.20× | ≥ 0.85× | met |", table)
        self.assertNotIn("| randn |", table)

    def test_decode_variants_either_default(self):
        shape = "B1 H32 KV1 Sq1 Sk4096 D128 cache f16"
        old = [self.row("22_split_kv_decode", shape, 0.020), self.row("22_split_kv_decode", f"{shape} [one-launch]", 0.016)]
        new = [self.row("22_split_kv_decode", shape, 0.015), self.row("22_split_kv_decode", f"{shape} [two-launches]", 0.021)]
        table = self.render("decode_variant_table", {"bench.csv": old})
        self.assertIn("| 1 | 1 | 4096 | 20.0 | 16.0 | 1.25× |", table)
        table = self.render("decode_variant_table", {"22_split_kv_decode/raw.csv": new}, "two-launches", "one-launch",
                            "22_split_kv_decode/raw.csv")
        self.assertIn("| 1 | 1 | 4096 | 21.0 | 15.0 | 1.40× |", table)
        self.assertIn("22_split_kv_decode/raw.csv", table)

    def test_decode_variants_ab_medians_over_rounds(self):
        shape = "B1 H32 KV1 Sq1 Sk4096 D128 cache f16"
        rows = []
        for rnd, (a, b) in enumerate([(0.010, 0.013), (0.012, 0.015), (0.011, 0.014)]):
            rows += [dict(self.row("22_split_kv_decode", shape, a), variant="one-launch", round=str(rnd)),
                     dict(self.row("22_split_kv_decode", f"{shape} [rows32]", b), variant="rows32", round=str(rnd))]
        table = self.render("decode_variants_ab_table", {"22_split_kv_decode/ab.csv": rows}, "22_split_kv_decode/ab.csv")
        self.assertIn("| batch | K/V heads | keys | one-launch µs | rows32 / one-launch |", table)
        self.assertIn("| 1 | 1 | 4096 | 11.0 | 1.27× |", table)  # medians 0.011 and 0.014
        self.assertIn("3 rounds", table)
        self.assertIn("Not measured yet", self.render("decode_variants_ab_table", {"x.csv": rows}, "missing.csv"))
        knob = [dict({k: v for k, v in r.items() if k != "variant"}, arm=r["variant"]) for r in rows]  # knob_ab's
        self.assertIn("| 1 | 1 | 4096 | 11.0 | 1.27× |",
                      self.render("decode_variants_ab_table", {"22_split_kv_decode/ab.csv": knob}, "22_split_kv_decode/ab.csv"))
        paged = [dict(r, problem=r["problem"].replace(" cache ", " cache p16 ")) for r in knob]  # step 23's rows
        table = self.render("decode_variants_ab_table", {"23/ab.csv": paged}, "23/ab.csv")
        self.assertIn("| 1 | 1 | 4096 | 11.0 | 1.27× |", table)
        self.assertIn("in pages of 16 keys", table)

    def test_stamp_runs_take_their_own_steps_bench_row(self):
        """Step 23's --bench prints step 22's row too (the same cache held contiguous): a paged run's time is its
        own step's row, whichever comes first; a step-22 run's is step 22's."""
        import results
        rows = ("23_paged_kv_decode  B1 H32 KV8 Sq1 Sk1024 D128 cache p16 f16   0.0114  400.00 GB/s  9.0% copy\n"
                "22_split_kv_decode  B1 H32 KV8 Sq1 Sk1024 D128 cache f16       0.0110  410.00 GB/s  9.3% copy\n")
        flags = "--batch 1 --heads 32 --kv-heads 8 --seq-q 1 --seq-k 1024 --head-dim 128"
        runs = results.stamp_runs(f"== paged16 {flags} --page-size 16\n{rows}== one-launch {flags}\n"
                                  + rows.split("\n", 1)[1])
        self.assertEqual([a for a, _, _ in runs], ["paged16", "one-launch"])
        self.assertEqual(runs[0][2]["ms"], 0.0114)
        self.assertEqual(runs[1][2]["ms"], 0.0110)
        self.assertNotIn("ms", results.stamp_runs(f"== one-launch {flags}\n{rows.split(chr(10))[0]}\n")[0][2])

    def test_paged_repeats_table_each_run(self):
        """short_paged/device.sh's lines (round, then a --bench --csv row): step 22's time is the row's prev_time_ms,
        each run's ratio is 22 over 23, the µs columns medians over the runs; rows of other steps are left out."""
        keys = "round step idea problem time_ms rate unit pct_peak peak peak_value prev_step prev_time_ms".split()
        shape = "B1 H32 KV8 Sq1 Sk1024 D128 cache p16 f16"
        rows = [dict(zip(keys, [str(i), "23_paged_kv_decode", "paged, with commas", shape, str(b), "1", "GB/s", "1",
                                "copy", "1", "22_split_kv_decode", str(a)]))
                for i, (b, a) in enumerate([(0.0114, 0.0110), (0.0120, 0.0108), (0.0113, 0.0112)])]
        rows.append(dict(zip(keys, ["0", "22_split_kv_decode", "x", shape, "0.5"] + ["1"] * 7)))
        table = self.render("paged_repeats_table", {"bench.csv": rows}, "bench.csv")
        self.assertIn("| 1 | 8 | 1024 | 11.0 | 11.4 | 0.96× 0.90× 0.99× |", table)
        self.assertIn("run 3 times", table)
        self.assertIn("Not measured yet", self.render("paged_repeats_table", {"bench.csv": rows}, "none.csv"))

    def test_decode_against_the_read_only_kernel(self):
        head = ["bytes", "mb", "blocks_per_sm", "loads_in_flight", "median_us", "gbs", "pct_copy", "copy_gbs", "check"]
        floor = [dict(zip(head, ["67108864", "67.1", "2", "4", "30.0", "0", "0", "3000", "ok"]))]
        shape = "B1 H32 KV32 Sq1 Sk4096 D128 cache f16"
        bench = [self.row("22_split_kv_decode", shape, 0.040), self.row("22_split_kv_decode", f"{shape} [two-launches]", 0.0375),
                 self.row("sdpa_cudnn", shape, 0.050), self.row("sdpa_flash", shape, 0.060)]
        table = self.render("decode_vs_read_table", {"read_floor.csv": floor, "bench.csv": bench})
        self.assertIn("| 1 | 32 | 4096 | 67 | 30.0 | 0.75 | 0.80 | 0.60 (SDPA-cuDNN) |", table)
        self.assertIn("step 22 two-launches", table)

    def test_read_floor_best_checked_row_and_the_step(self):
        head = ["bytes", "mb", "blocks_per_sm", "loads_in_flight", "median_us", "gbs", "pct_copy", "copy_gbs", "check"]
        floor = [dict(zip(head, ["67108864", "67.1", "1", "4", "35.0", "0", "0", "3000", "ok"])),
                 dict(zip(head, ["67108864", "67.1", "2", "8", "30.0", "0", "0", "3000", "ok"])),
                 dict(zip(head, ["67108864", "67.1", "8", "16", "10.0", "0", "0", "3000", "FAIL"])),
                 dict(zip(head, ["0", "0", "2", "4", "4.0", "0", "0", "3000", "ok"]))]
        bench = [self.row("22_split_kv_decode", "B1 H32 KV32 Sq1 Sk4096 D128 cache f16", 0.040)]
        table = self.render("read_floor_table", {"read_floor.csv": floor, "bench.csv": bench})
        pct = 100 * 67108864 / 30.0 / 1e3 / 3000
        self.assertIn(f"| 67.1 | 30.0 | 2237 | {pct:.0f}% | 2 × 8 | {67108864 / (0.85 * 3000) / 1e3:.1f} | 40.0 | 0.75 |",
                      table)
        self.assertIn("| 0 (the launch alone) | 4.0 |", table)
        self.assertIn("Not measured", self.render("read_floor_table", {"bench.csv": bench}))

    def test_read_floor_of_another_gpu_reads_its_own_bench(self):
        import results
        head = ["bytes", "mb", "blocks_per_sm", "loads_in_flight", "median_us", "gbs", "pct_copy", "copy_gbs", "check"]
        floor = [dict(zip(head, ["67108864", "67.1", "2", "8", "30.0", "0", "0", "3000", "ok"]))]
        shape = "B1 H32 KV32 Sq1 Sk4096 D128 cache f16"
        with tempfile.TemporaryDirectory() as d:
            step22 = lambda ms: [self.row("22_split_kv_decode", shape, ms)]  # noqa: E731
            for gpu, files in (("h200", {"read_floor.csv": floor, "bench.csv": step22(0.050)}),
                               (results.GPU, {"bench.csv": step22(0.040)})):
                for rel, rows in files.items():
                    os.makedirs(os.path.join(d, gpu), exist_ok=True)
                    with open(os.path.join(d, gpu, rel), "w", newline="") as f:
                        w = csv.DictWriter(f, fieldnames=list(rows[0]), lineterminator="\n")
                        w.writeheader()
                        w.writerows(rows)
            saved = results.gpu_dir
            results.gpu_dir = lambda gpu=None: os.path.join(d, gpu or results.GPU)
            try:
                table = results.read_floor_table(gpu="h200")
                missing = results.read_floor_table()
            finally:
                results.gpu_dir = saved
        self.assertIn("| 67.1 | 30.0 | 2237 |", table)
        self.assertIn("| 50.0 | 0.60 |", table)  # h200's step 22, not the docs' GPU's 40 µs
        self.assertIn("profiles/h200/read_floor.csv", table)
        self.assertIn(f"no `profiles/{results.GPU}/read_floor.csv`", missing)

    def test_stamps_tables_read_each_run(self):
        """The stamps probe's output: one-launch runs only in the phase table, each value from its own line; the
        merge table takes a shape's first run of an arm, counts its batches and takes their median."""
        import results
        stamps = lambda splits, first, gm, ms: (  # noqa: E731
            f"STAMPS grid {splits} x 1 x 2 splits {splits} one-launch blocks {2 * splits} clock 1.7 GHz\n"
            f"STAMPS  first tile         us: min 1.00 median {first:.2f} max 3.00\n"
            "STAMPS  stream             us: min 4.00 median 5.00 max 6.00\n"
            "STAMPS  block merge+store  us: min 0.70 median 0.80 max 0.90\n"
            "STAMPS    m, l to smem     us: min 0.10 median 0.11 max 0.12\n"
            "STAMPS    O to smem        us: min 0.20 median 0.21 max 0.22\n"
            "STAMPS    sum, store       us: min 0.40 median 0.41 max 0.42\n"
            "STAMPS  barrier            us: min 0.05 median 1.50 max 2.50\n"
            f"STAMPS  grid merge         us: min 0.10 median 0.10 max {gm:.2f}\n"
            "STAMPS  merge_row (32 rows) us, median [max] of each step: whole 3.70 [4.10]; LSEs 0.66 [0.70]; "
            "b0 0.40 [0.50] b1 0.30 [0.40] b2 0.50 [0.60]; store 0.13 [0.14]\n"
            "STAMPS  start (globaltimer) us: median 0.05 max 0.10; end: min 9.00 median 9.50 max 13.25\n"
            f"22_split_kv_decode  B1 H32 KV1 Sq1 Sk16384 D128 cache f16     {ms}  536.00 GB/s  12.6% copy\n")
        flags = "--dtype f16 --batch 1 --heads 32 --kv-heads 1 --seq-q 1 --seq-k 16384 --head-dim 128"
        text = (f"== one-launch {flags}\n" + stamps(64, 2.5, 4.2, "0.0157") +
                f"== two-launches {flags}\n" + stamps(64, 9.9, 9.9, "0.0190") +
                f"== base FA_STAMPS=8 {flags}\n" + stamps(64, 2.5, 4.2, "0.0157") +
                f"== base FA_STAMPS=14 {flags}\n" + stamps(32, 2.5, 4.2, "0.0157"))
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "s.txt"), "w", encoding="utf-8") as f:
                f.write(text)
            saved = results.gpu_dir
            results.gpu_dir = lambda gpu=None: d
            try:
                phases = results.decode_stamps_table("s.txt")
                merges = results.merge_stamps_table("s.txt")
            finally:
                results.gpu_dir = saved
        self.assertIn("| 1 | 1 | 16384 | 64 | 128 | 15.7 | 13.2 | 2.5 / 3.0 | 5.0 / 6.0 | 0.8 | 1.5 / 2.5 | 4.2 |", phases)
        self.assertNotIn("9.9", phases)  # the two-launches run is not a row
        self.assertIn("| 1 | 1 | 16384 | 64 | base | 0.11 | 0.21 | 0.41 | 3.70 | 0.66 | 3 × 0.40 | 0.13 |", merges)
        self.assertEqual(merges.count("| base |"), 1)  # base's second call (32 splits) is not a row
        # the budget table: only one-launch runs of more than 50 MB; 85% of copy and the slack from read_floor.csv
        big = flags.replace("--kv-heads 1", "--kv-heads 8").replace("--seq-k 16384", "--seq-k 65536")
        text += f"== one-launch {big}\n" + stamps(64, 2.5, 4.2, "0.0157").replace("Sk16384", "Sk65536")
        text += f"== one-launch {big.replace('--batch 1', '--batch 2')}\n" + stamps(1, 2.5, 4.2, "0.0157")
        floor = "bytes,mb,blocks_per_sm,loads_in_flight,median_us,gbs,pct_copy,copy_gbs,check\n" \
                "268435456,268.4,4,4,72.40,0,0,4000.0,ok\n268435456,268.4,2,4,75.00,0,0,4000.0,ok\n"
        with tempfile.TemporaryDirectory() as d:
            for name, body in (("s.txt", text), ("read_floor.csv", floor)):
                with open(os.path.join(d, name), "w", encoding="utf-8") as f:
                    f.write(body)
            saved = results.gpu_dir
            results.gpu_dir = lambda gpu=None: d
            try:
                budget = results.decode_budget_table("s.txt")
            finally:
                results.gpu_dir = saved
        self.assertIn("| 1 | 8 | 65536 | 64 | 268 | 15.7 | 79.0 | 11.8 | 72.4 | 895% |", budget)  # 67.1 µs at copy
        self.assertIn("| 2 | 8 | 65536 | 1 | 537 | 15.7 | 157.9 | 23.7 | - | - |", budget)  # one split: waves
        self.assertNotIn("| 16384 |", budget)  # 8 MB: under 50

    def test_import_takes_the_decode_microbench_and_pinned_splits(self):
        """results.py import: decode_stream.csv beside read_floor.csv, and gpu_session.sh's SPLITS_ARGS output
        (22_split_kv_decode/history/decode_splits_pinned.csv); other history files of a tarball are not taken."""
        import results
        import tarfile
        with tempfile.TemporaryDirectory() as d:
            src, dst = os.path.join(d, "out"), os.path.join(d, "h100")
            os.makedirs(src)
            with open(os.path.join(src, "env.txt"), "w") as f:
                f.write("NVIDIA H100 80GB HBM3, 580.0, 81559 MiB, 1980 MHz\n")
            names = ["decode_stream.csv", "22_split_kv_decode/history/decode_splits_pinned.csv",
                     "22_split_kv_decode/history/other.csv"]
            with tarfile.open(os.path.join(src, "profiles.tar.gz"), "w:gz") as t:
                for n in names:
                    data = f"rows of {n}\n".encode()
                    info = tarfile.TarInfo(n)
                    info.size = len(data)
                    t.addfile(info, io.BytesIO(data))
            saved = results.gpu_dir
            results.gpu_dir = lambda gpu=None: dst
            try:
                with contextlib.redirect_stdout(io.StringIO()) as out:
                    results.import_session(src)
            finally:
                results.gpu_dir = saved
            self.assertTrue(os.path.exists(os.path.join(dst, names[0])))
            self.assertTrue(os.path.exists(os.path.join(dst, names[1])))
            self.assertFalse(os.path.exists(os.path.join(dst, names[2])))
            self.assertIn("decode_stream.csv", out.getvalue())

    def test_decode_stream_spins_side_by_side(self):
        head = ["geometry", "streams", "keys", "splits", "halves", "blocks", "copy", "stages", "spin", "mb", "median_us",
                "gbs", "pct_copy", "copy_gbs", "check"]
        g = "B1 KV1 131072 (rule: 64 splits, 16-row halves)"
        rows = [dict(zip(head, [g, "1", "131072", "64", "2", "128", "cp.async", "3", str(spin), "67.109", us, "0", "0",
                                "3000", ok])) for spin, us, ok in [(0, "31.5", "ok"), (1024, "44.0", "ok")]]
        rows.append(dict(zip(head, [g, "1", "131072", "64", "2", "128", "cp.async", "4", "0", "67.109", "30.0", "0", "0",
                                    "3000", "FAIL"])))
        rows.append(dict(zip(head, [g, "1", "131072", "64", "2", "128", "tma", "3", "0", "67.109", "29.9", "0", "0",
                                    "3000", "ok"])))
        rows.append(dict(zip(head, ["2:4096:64:1", "2", "4096", "64", "1", "128", "cp.async", "3", "0", "4.194", "9.0", "0",
                                    "0", "3000", "ok"])))
        floor = [dict(zip(["bytes", "mb", "blocks_per_sm", "loads_in_flight", "median_us", "gbs", "pct_copy", "copy_gbs",
                           "check"], ["67108864", "67.1", "2", "4", "29.6", "0", "0", "3000", "ok"]))]
        bench = [self.row("22_split_kv_decode", "B1 H32 KV1 Sq1 Sk131072 D128 cache f16", 0.0455)]
        files = {"decode_stream.csv": rows, "read_floor.csv": floor, "bench.csv": bench}
        table = self.render("decode_stream_table", files, "spins")  # the step's copies (cp.async, ring 3) by spin
        self.assertIn("| K/V MB | µs, spin 0 | µs, spin 1024 | read-only µs | step 22 µs |", table)
        self.assertIn(f"| {g} | 128 | 67 | 31.5 | 44.0 | 29.6 | 45.5 |", table)
        self.assertIn("| 2:4096:64:1 | 128 | 4 | 9.0 | - | - | - |", table)  # no floor row, no shape named
        self.assertIn("(**1 failed**: no time shown)", table)
        table = self.render("decode_stream_table", files, "copies")  # spin 0, each copy and ring
        self.assertIn("| K/V MB | cp.async, ring 3 µs | cp.async, ring 4 µs | tma, ring 3 µs |", table)
        self.assertIn(f"| {g} | 128 | 67 | 31.5 | - | 29.9 |", table)  # ring 4 failed its check: no time
        self.assertIn("| 2:4096:64:1 | 128 | 4 | 9.0 | - | - |", table)
        self.assertIn("Not measured yet", self.render("decode_stream_table", {"bench.csv": bench}))


class PagedTable(unittest.TestCase):
    """Doc 23's table: step 23's rows by page size against step 22's interleaved time (prev_time_ms)."""

    def test_pages_of_16_and_1_against_the_contiguous_step(self):
        rows = [{"step": "23_paged_kv_decode", "problem": "B1 H32 KV1 Sq1 Sk1024 D128 cache p16 f16", "time_ms": "0.010",
                 "prev_time_ms": "0.0099"},
                {"step": "23_paged_kv_decode", "problem": "B1 H32 KV1 Sq1 Sk1024 D128 cache p1 f16", "time_ms": "0.020",
                 "prev_time_ms": "0.010"},
                {"step": "23_paged_kv_decode", "problem": "B8 H32 Sq1 Sk4096 D128 cache p16 f16", "time_ms": "0.050",
                 "prev_time_ms": "0.040"}]
        table = table_from_bench("paged_table", rows)
        self.assertIn("| B1 H32 KV1 Sq1 Sk1024 D128 cache f16 | 9.9 | 10.0 | 0.99× | 10.0 | 20.0 | 0.50× |", table)
        self.assertIn("| B8 H32 Sq1 Sk4096 D128 cache f16 | 40.0 | 50.0 | 0.80× | - | - | - |", table)
        self.assertIn("1 of 2 shapes (below: B8 H32 Sq1 Sk4096 D128 cache f16)", table)

    def test_ncu_metric_runs_one_per_header_in_base_units(self):
        import results
        text = textwrap.dedent("""\
            == base --batch 1 --seq-k 64
                dram__bytes_read.sum                                     Mbyte        67.19
                gpu__time_duration.sum                                      us        34.69
                lts__t_sectors.sum                                      sector    5,937,683
            == ahead4 --batch 1 --seq-k 64
                dram__bytes_read.sum                                     Gbyte         4.58
            ==ERROR== a line that is not a metric
            """)
        runs = results.ncu_metric_runs(text)
        self.assertEqual([(a, f) for a, f, _ in runs], [("base", "--batch 1 --seq-k 64"), ("ahead4", "--batch 1 --seq-k 64")])
        self.assertAlmostEqual(runs[0][2]["dram__bytes_read.sum"], 67.19e6)
        self.assertAlmostEqual(runs[0][2]["gpu__time_duration.sum"], 34.69e-6)
        self.assertEqual(runs[0][2]["lts__t_sectors.sum"], 5937683)
        self.assertEqual(runs[1][2], {"dram__bytes_read.sum": 4.58e9})

    def test_randn_rows_are_their_own_table(self):
        row = {"step": "23_paged_kv_decode", "problem": "B1 H32 KV1 Sq1 Sk1024 D128 cache p16 f16", "time_ms": "0.010",
               "prev_time_ms": "0.0099"}
        rows = [row, dict(row, problem=row["problem"] + " randn", time_ms="0.020", prev_time_ms="0.010")]
        uniform = table_from_bench("paged_table", rows)
        self.assertIn("| B1 H32 KV1 Sq1 Sk1024 D128 cache f16 | 9.9 | 10.0 | 0.99× | - | - | - |", uniform)
        self.assertNotIn("randn", uniform)
        self.assertIn("1 of 1 shapes", uniform)
        import results
        results.BENCH_OVERRIDE = None
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "bench.csv")
            with open(path, "w", newline="") as f:
                w = csv.DictWriter(f, fieldnames=list(row), lineterminator="\n")
                w.writeheader()
                w.writerows(rows)
            self.assertEqual(sorted(results.paged_rows(path, "23_paged_kv_decode", "randn")),
                             [("B1 H32 KV1 Sq1 Sk1024 D128 cache f16", 16)])
            self.assertEqual(results.paged_rows(path, "23_paged_kv_decode", "randn")[("B1 H32 KV1 Sq1 Sk1024 D128 cache f16", 16)],
                             [(0.010, 0.020)])


class BwdExperiments(unittest.TestCase):
    """Step 16's table of A/B experiments is frozen in docs/history/16_deterministic_backward.md: not rendered any more."""

    def test_not_rendered(self):
        import results
        self.assertNotIn("results:bwd_experiments", results.BLOCKS["docs/16_deterministic_backward.md"])
        self.assertFalse(hasattr(results, "bwd_experiments_table"))


class CausalOrder(unittest.TestCase):
    """results.py's model of step 16's causal order: list scheduling, the head-group rule, the start order."""

    def setUp(self):
        import results
        self.r = results

    def test_list_schedule(self):
        # 2 SMs: 3 | 3, then 2 on each (5 | 5), then 2 on the first: 7
        self.assertEqual(self.r.list_schedule([3, 3, 2, 2, 2], 2), 7)
        self.assertEqual(self.r.list_schedule([4, 1, 1, 1, 1], 2), 4)

    def test_head_group(self):
        self.assertEqual(self.r.causal_head_group(32, 8192), 2)
        self.assertEqual(self.r.causal_head_group(16, 16384), 1)
        self.assertEqual(self.r.causal_head_group(6, 1024), 2)  # 4 does not divide 6
        self.assertEqual(self.r.causal_head_group(17, 100), 1)
        self.assertEqual(self.r.causal_head_group(256, 1024), 16)

    def test_start_order(self):
        # 3 heads of 256 keys (2 key blocks visiting 4 and 2 query tiles of 64): groups of 2, then the last head
        self.assertEqual(self.r.causal_order_works(3, 256, 64, 2), [4, 4, 2, 2, 4, 2])
        self.assertEqual(self.r.causal_order_works(2, 256, 64, 1), [4, 2, 4, 2])

    def test_table(self):
        table = self.r.causal_order_table(seqs=(8192,))
        self.assertIn("| 128 | 8192 | 32 | 2048 | 128 … 2 |", table)
        self.assertIn("| 64 | 8192 | 64 | 4096 | 64 … 1 |", table)


class BwdWaves(unittest.TestCase):
    """Step 16's last-wave table is frozen in docs/history/16_deterministic_backward.md: not rendered any more."""

    def test_not_rendered(self):
        import results
        self.assertNotIn("results:bwd_waves", results.BLOCKS["docs/16_deterministic_backward.md"])
        self.assertFalse(hasattr(results, "bwd_waves_table"))


class Step11Candidates(unittest.TestCase):
    """profiles/candidates.py's name discovery (a mock executable) and results.py's table (synthetic rows)."""

    def setUp(self):
        import results
        self.results = results
        self.tmp = tempfile.mkdtemp(prefix="cand_")

    def tearDown(self):
        self.results.CANDIDATES_OVERRIDE = None
        shutil.rmtree(self.tmp)

    def test_names_from_the_executables_refusal(self):
        import candidates
        exe = os.path.join(self.tmp, "11_tuned_forward")
        with open(exe, "w") as f:
            f.write("#!/bin/sh\necho \"error: 11_tuned_forward: FA_STEP11_CONFIG=$FA_STEP11_CONFIG is not a candidate "
                    "for head_dim 64 (candidates: w4m2n128s2 w4m1n64s3q)\"\nexit 2\n")
        os.chmod(exe, 0o755)
        self.assertEqual(candidates.candidate_names(exe, 64), ["w4m2n128s2", "w4m1n64s3q"])

    def test_table(self):
        path = os.path.join(self.tmp, "step11_candidates.csv")
        self.results.CANDIDATES_OVERRIDE = path
        self.assertIn("Not measured yet", self.results.step11_candidates_table())
        rows = [dict(bench_row("11_tuned_forward", p, 1), candidate=c, rate=r)
                for c, p, r in (("a", "B4 H32 S4096 D64 f16", 300), ("b", "B4 H32 S4096 D64 f16", 250),
                                ("a", "B4 H16 S4096 D128 f16", 200), ("c", "B4 H16 S4096 D128 f16", 360))]
        with open(path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=["candidate"] + fp.BENCH_COLUMNS, lineterminator="\n")
            w.writeheader()
            w.writerows(rows)
        table = self.results.step11_candidates_table()
        self.assertIn("| B4 H32 S4096 D64 f16 | **300.0** | 250.0 |", table)
        self.assertIn("| B4 H16 S4096 D128 f16 | 200.0 | **360.0** |", table)


class BenchBracket(unittest.TestCase):
    """bench.py's mean of SDPA's two passes (before and after the steps)."""

    def test_mean_of_two_passes(self):
        import bench
        def row(step, problem, ms, rate, pct):
            return dict(step=step, problem=problem, time_ms=str(ms), rate=str(rate), pct_peak=str(pct), idea="x")
        before = [row("sdpa_cudnn", "B1 H16 S8192 D128 f16", 1.0, 600, 60), row("sdpa_flash", "P2", 2.0, 100, -1),
                  row("sdpa_flash", "only before", 5.0, 10, 1)]
        after = [row("sdpa_cudnn", "B1 H16 S8192 D128 f16", 1.2, 500, 50), row("sdpa_flash", "P2", 2.0, 100, -1),
                 row("sdpa_flash", "only after", 3.0, 20, 2)]
        rows, drifts = bench.bracket_mean(before, after)
        got = {r["problem"]: r for r in rows}
        self.assertEqual(len(rows), 4)
        # mean time 1.1; rate and % of peak scaled from the second pass's: 500 * 1.2 / 1.1, 50 * 1.2 / 1.1
        self.assertAlmostEqual(float(got["B1 H16 S8192 D128 f16"]["time_ms"]), 1.1)
        self.assertAlmostEqual(float(got["B1 H16 S8192 D128 f16"]["rate"]), 545.4545, places=3)
        self.assertAlmostEqual(float(got["B1 H16 S8192 D128 f16"]["pct_peak"]), 54.55, places=2)
        self.assertEqual(got["P2"]["pct_peak"], "-1")  # no peak: left as it is
        self.assertEqual(got["only before"]["time_ms"], "5.0")
        self.assertEqual(got["only after"]["time_ms"], "3.0")
        self.assertEqual([round(x, 6) for x in drifts], [0.2, 0.0])


class BenchTimer(unittest.TestCase):
    """bench.py's SDPA timer: the GPU held (torch.cuda._sleep) after each flush, before the start event."""

    def test_hold_between_flush_and_start_event(self):
        import types
        import bench
        order = []

        class Event:
            def __init__(self, enable_timing=False):
                self.t = None

            def record(self):
                order.append("record")
                self.t = len(order)

            def elapsed_time(self, end):
                return float(end.t - self.t)

        class Flush:
            def fill_(self, x):
                order.append("flush")

        cuda = types.SimpleNamespace(Event=Event, synchronize=lambda: None,
                                     _sleep=lambda cycles: order.append(("hold", cycles)))
        torch = types.SimpleNamespace(cuda=cuda)
        ms = bench.median_ms(torch, lambda: order.append("call"), Flush(), reps=3, warmup=1)
        self.assertEqual(order[:6], ["call", "flush", ("hold", bench.HOLD_CYCLES), "record", "call", "record"])
        self.assertEqual(ms, 2.0)  # the events around the call only
        del cuda._sleep  # a torch without _sleep: no hold, the same events
        order.clear()
        bench.median_ms(torch, lambda: order.append("call"), Flush(), reps=1, warmup=0)
        self.assertEqual(order, ["flush", "record", "call", "record"])

    def test_hold_as_long_as_the_steps_timer(self):
        """The steps' C++ timer (harness/timer.h) holds the GPU for as many cycles as bench.py's SDPA timer, so
        the two start their calls alike (docs/conventions.md, "Measurement")."""
        import re
        import bench
        with open(os.path.join(fp.ROOT, "harness", "timer.h")) as f:
            m = re.search(r"long long hold_cycles = 1ll << (\d+);", f.read())
        self.assertIsNotNone(m, "harness/timer.h: no TimingOptions::hold_cycles")
        self.assertEqual(1 << int(m.group(1)), bench.HOLD_CYCLES)
        with open(os.path.join(fp.ROOT, "harness", "timer.cpp")) as f:
            src = f.read()  # the hold after the flush's memset, before the start event
        self.assertLess(src.index("cudaMemsetAsync(flush"), src.index("hold_gpu(opt.hold_cycles"))
        self.assertLess(src.index("hold_gpu(opt.hold_cycles"), src.index("cudaEventRecord(events[2 * (r * n + k)]"))


class BenchMerge(unittest.TestCase):
    def test_auto_sdpa_modes(self):
        import bench
        # each run re-measures only the SDPA rows its steps are compared with
        self.assertEqual(bench.auto_sdpa_modes("auto", True, [False, False, False]), "fwd")  # --steps 09,10,11
        self.assertEqual(bench.auto_sdpa_modes("auto", True, [True, True]), "bwd")  # --steps 07,08
        self.assertEqual(bench.auto_sdpa_modes("auto", True, [True, False]), "all")  # --steps 08,09
        self.assertEqual(bench.auto_sdpa_modes("auto", False, [True, False]), "all")  # every step
        self.assertEqual(bench.auto_sdpa_modes("auto", True, []), "all")  # --no-steps
        self.assertEqual(bench.auto_sdpa_modes("fwd", True, [True]), "fwd")  # asked for explicitly

    def test_variants_from_help(self):
        import bench
        with tempfile.TemporaryDirectory() as d:
            for name, help_text in (("two", "  --variant S   which of the step's variants runs (default atomic) "
                                             "(atomic|deterministic)\n  --help   this text\n"),
                                    ("none", "  --dtype S   element type (f16|bf16)\n  --help   this text\n")):
                exe = os.path.join(d, name)
                with open(exe, "w") as f:
                    f.write("#!/bin/sh\ncat <<'EOF'\n" + help_text + "EOF\n")
                os.chmod(exe, 0o755)
            self.assertEqual(bench.variants(os.path.join(d, "two")), ["atomic", "deterministic"])
            self.assertEqual(bench.variants(os.path.join(d, "none")), [])

    def test_merge_rows(self):
        import bench
        old = [bench_row("07_flash_backward", "B1 H1 S8 D64 f32 fwd", 1), bench_row("09_tensor_core_forward", "P f16", 9),
               bench_row("sdpa_flash", "P f16", 1), bench_row("sdpa_flash", "P f16 bwd", 2),
               bench_row("sdpa_cudnn", "P f16", 3)]
        new = [bench_row("09_tensor_core_forward", "P f16", 8), bench_row("09_tensor_core_forward", "P bf16", 8),
               bench_row("sdpa_flash", "P f16", 1.5), bench_row("sdpa_flash", "Q f16", 4)]
        rows, kept = bench.merge_rows(old, new)
        self.assertEqual(kept, 3)  # 07's row, SDPA flash's backward row, SDPA cuDNN's row
        self.assertEqual([(r["step"], r["problem"], r["time_ms"]) for r in rows],
                         [("07_flash_backward", "B1 H1 S8 D64 f32 fwd", "1"), ("09_tensor_core_forward", "P f16", "8"),
                          ("09_tensor_core_forward", "P bf16", "8"), ("sdpa_flash", "P f16", "1.5"),
                          ("sdpa_flash", "P f16 bwd", "2"), ("sdpa_cudnn", "P f16", "3"), ("sdpa_flash", "Q f16", "4")])
        # --gqa-only: a step's rows are replaced problem by problem, its other (MHA) rows kept
        old = [bench_row("18_hopper_warp_specialized", "P f16", 5), bench_row("18_hopper_warp_specialized", "G f16", 6),
               bench_row("sdpa_cudnn", "G f16", 7)]
        new = [bench_row("18_hopper_warp_specialized", "G f16", 4), bench_row("sdpa_cudnn", "G f16", 3)]
        rows, kept = bench.merge_rows(old, new, by_problem=True)
        self.assertEqual(kept, 1)
        self.assertEqual([(r["step"], r["problem"], r["time_ms"]) for r in rows],
                         [("18_hopper_warp_specialized", "P f16", "5"), ("18_hopper_warp_specialized", "G f16", "4"),
                          ("sdpa_cudnn", "G f16", "3")])


class BenchInputs(unittest.TestCase):
    """--inputs: the ' randn' suffix of a problem, kept apart by --merge, passed to the steps, refused beside the
    committed bench.csv."""

    def test_split_and_name(self):
        self.assertEqual(fp.split_inputs("B8 H32 S2048 D64 f16 bwd [deterministic] randn"),
                         ("B8 H32 S2048 D64 f16 bwd [deterministic]", "randn"))
        self.assertEqual(fp.split_inputs("B8 H32 S2048 D64 f16"), ("B8 H32 S2048 D64 f16", "uniform"))
        self.assertEqual(fp.with_inputs("B8 H32 S2048 D64 f16", "randn"), "B8 H32 S2048 D64 f16 randn")
        self.assertEqual(fp.with_inputs("B8 H32 S2048 D64 f16", "uniform"), "B8 H32 S2048 D64 f16")
        with self.assertRaises(ValueError):
            fp.with_inputs("P", "normal")
        # the tables' parser never takes a randn row for a uniform one
        self.assertIsNone(fp.split_problem("B8 H32 S2048 D64 f16 randn"))
        self.assertIsNone(fp.split_problem("B8 H32 S2048 D64 f16 bwd randn"))
        self.assertEqual(fp.split_problem("B8 H32 S2048 D64 f16 bwd")["mode"], "bwd")

    def test_merge_keeps_uniform_and_randn_apart(self):
        import bench
        old = [bench_row("18_hopper_warp_specialized", "P f16", 5), bench_row("18_hopper_warp_specialized", "P f16 randn", 6),
               bench_row("sdpa_cudnn", "P f16", 7), bench_row("sdpa_cudnn", "P f16 randn", 8)]
        new = [bench_row("18_hopper_warp_specialized", "P f16 randn", 4), bench_row("sdpa_cudnn", "P f16 randn", 3)]
        rows, kept = bench.merge_rows(old, new)
        self.assertEqual(kept, 2)  # step 18's uniform row and SDPA's uniform row
        self.assertEqual([(r["step"], r["problem"], r["time_ms"]) for r in rows],
                         [("18_hopper_warp_specialized", "P f16", "5"), ("18_hopper_warp_specialized", "P f16 randn", "4"),
                          ("sdpa_cudnn", "P f16", "7"), ("sdpa_cudnn", "P f16 randn", "3")])

    def test_step_rows_pass_inputs_in_turn(self):
        import bench
        with tempfile.TemporaryDirectory() as d:
            exe = os.path.join(d, "18_fake")
            log = os.path.join(d, "calls")
            write_exe(exe, textwrap.dedent(f"""\
                #!/bin/sh
                case "$*" in *--help*|*--device-info*) exit 1;; esac
                echo "$*" >> {log}
                suffix=""; case "$*" in *"--inputs randn"*) suffix=" randn";; esac
                echo "step,idea,problem,time_ms"
                echo "18_fake,x,P f16$suffix,1"
                """))
            rows, failed = bench.step_rows([exe], inputs=("uniform", "randn"))
            self.assertEqual(failed, 0)
            self.assertEqual([r["problem"] for r in rows], ["P f16", "P f16 randn"])
            with open(log) as f:
                self.assertEqual(f.read().splitlines(), ["--sweep --csv", "--sweep --csv --inputs randn"])

    def test_step_rows_only_the_variants_named(self):
        import bench
        with tempfile.TemporaryDirectory() as d:
            exe = os.path.join(d, "21_fake")
            log = os.path.join(d, "calls")
            write_exe(exe, textwrap.dedent(f"""\
                #!/bin/sh
                case "$*" in *--device-info*) exit 1;; esac
                case "$*" in *--help*) echo "  --variant S    which variant (full|no-writer|deterministic)"; exit 0;; esac
                echo "$*" >> {log}
                echo "step,idea,problem,time_ms"
                echo "21_fake,x,P f16,1"
                """))
            rows, failed = bench.step_rows([exe], only_variants={"full", "atomic"})
            self.assertEqual(failed, 0)
            with open(log) as f:
                self.assertEqual(f.read().splitlines(), ["--sweep --csv --variant full"])
            os.remove(log)
            bench.step_rows([exe])  # no filter: every variant, the ablation one on its cells only
            with open(log) as f:
                calls = f.read().splitlines()
            self.assertEqual(calls[0], "--sweep --csv --variant full")
            self.assertEqual(calls[-1], "--sweep --csv --variant deterministic")
            self.assertTrue(all("--variant no-writer" in c for c in calls[1:-1]) and len(calls) > 3)

    def test_decode_step_sweeps_only_the_variants_the_docs_read(self):
        import bench
        with tempfile.TemporaryDirectory() as d:
            exe = os.path.join(d, "22_fake")
            log = os.path.join(d, "calls")
            write_exe(exe, textwrap.dedent(f"""\
                #!/bin/sh
                case "$*" in *--device-info*) exit 1;; esac
                case "$*" in *--help*) echo "  --variant S    which (one-launch|two-launches|rows32|unpacked)"; exit 0;; esac
                echo "$*" >> {log}
                echo "step,idea,problem,time_ms"
                echo "22_fake,x,P cache f16,1"
                """))
            bench.step_rows([exe])
            with open(log) as f:
                self.assertEqual(f.read().splitlines(), ["--sweep --csv --variant one-launch",
                                                         "--sweep --csv --variant two-launches"])
            os.remove(log)
            bench.step_rows([exe], only_variants={"unpacked"})  # named: swept
            with open(log) as f:
                self.assertEqual(f.read().splitlines(), ["--sweep --csv --variant unpacked"])

    def test_knob_ab_decode_arms_run_variants_with_the_page_size(self):
        import knob_ab
        with tempfile.TemporaryDirectory() as d:
            exe, log = os.path.join(d, "23_paged_kv_decode"), os.path.join(d, "calls")
            write_exe(exe, textwrap.dedent(f"""\
                #!/bin/sh
                echo "$*" >> {log}
                v=""; case "$*" in *"--variant unpacked"*) v=" [unpacked]";; esac
                echo "step,idea,problem,time_ms,device"
                echo "23_paged_kv_decode,x,P cache p16 f16$v,0.01,H100"
                """))
            out = os.path.join(d, "ab.csv")
            summary = io.StringIO()
            with contextlib.redirect_stdout(summary):
                knob_ab.main(["--experiment", "e", "--decode", "--kv-heads", "1", "--rounds", "2", "--page-size", "16",
                              "--arm", f"one-launch={exe}#one-launch", "--arm", f"unpacked={exe}#unpacked", "--out", out])
            with open(log) as f:
                calls = f.read().splitlines()
            self.assertEqual(len(calls), 15 * 2 * 2)  # batch 1, 8, 64 · 5 lengths · 2 variants · 2 rounds
            self.assertTrue(all("--page-size 16 --variant" in c for c in calls))
            self.assertTrue(calls[0].endswith("--variant one-launch") and calls[1].endswith("--variant unpacked"))
            self.assertTrue(calls[2].endswith("--variant unpacked"))  # round 2: the order reversed
            with open(out) as f:
                self.assertEqual(len(list(csv.DictReader(f))), 60)
            # one cell under both arms, whatever variant its rows name: a ratio of 1.000 per cell
            self.assertIn("SUMMARY e: unpacked/one-launch median 1.000", summary.getvalue())

    def test_knob_ab_shapes_run_as_given(self):
        import knob_ab
        with tempfile.TemporaryDirectory() as d:
            exe, log = os.path.join(d, "23_paged_kv_decode"), os.path.join(d, "calls")
            write_exe(exe, textwrap.dedent(f"""\
                #!/bin/sh
                echo "$*" >> {log}
                echo "step,idea,problem,time_ms,device"
                echo "23_paged_kv_decode,x,P cache p16 f16,0.01,H100"
                echo "23_paged_kv_decode,x,P cache p16 f16 bwd,0.02,H100"
                """))
            out = os.path.join(d, "ab.csv")
            with contextlib.redirect_stdout(io.StringIO()):
                knob_ab.main(["--experiment", "e", "--rounds", "1", "--arm", f"a={exe}", "--arm", f"b={exe}#x",
                              "--shape", "--batch 2 --page-size 16", "--shape", "--batch 3 --bwd", "--out", out])
            with open(log) as f:
                self.assertEqual(f.read().splitlines(), ["--bench --csv --batch 2 --page-size 16",
                                                         "--bench --csv --batch 2 --page-size 16 --variant x",
                                                         "--bench --csv --batch 3 --bwd",
                                                         "--bench --csv --batch 3 --bwd --variant x"])
            with open(out) as f:  # the forward row, then the bwd row where the flags ask for it
                self.assertEqual([r["time_ms"] for r in csv.DictReader(f)], ["0.01", "0.01", "0.02", "0.02"])

    def test_warps_and_tiles_of_a_decode_launch(self):
        # 2 splits of 65536 keys: 32768 a block, 512 tiles of 64; 128 blocks of 4 warps
        self.assertEqual(fp.warps_and_tiles("(2, 64, 1)", "(128, 1, 1)", 65536, 64), (512, 512))
        # a ragged split: 1000 keys over 3 splits, 334 a block, 3 tiles of 128
        self.assertEqual(fp.warps_and_tiles("(3, 1, 2)", "(128, 1, 1)", 1000, 128), (24, 3))

    def test_on_inputs_names_the_problem_only_for_its_inputs(self):
        self.assertEqual(fp.on_inputs("B1 H32 Sq1 Sk1024 D128 cache f16 randn", "randn"), "B1 H32 Sq1 Sk1024 D128 cache f16")
        self.assertIsNone(fp.on_inputs("B1 H32 Sq1 Sk1024 D128 cache f16 randn", "uniform"))
        self.assertEqual(fp.on_inputs("B8 H32 S2048 D64 f16 bwd", "uniform"), "B8 H32 S2048 D64 f16 bwd")
        self.assertIsNone(fp.on_inputs("B8 H32 S2048 D64 f16 bwd", "randn"))

    def test_decode_launch_warp_tiles_from_a_details_page(self):
        line = ("  void decode_split<__half, Config<128, 2, 64>, 1>(const T1 *, int) (2, 64, 1)x(128, 1, 1), "
                "Context 1, Stream 7, Device 0, CC 9.0")
        self.assertEqual(fp.decode_launch_warp_tiles(line, 65536), 512 * 512)  # the tile's keys: Config's last
        self.assertEqual(fp.decode_launch_warp_tiles(line.replace("64>", "128>"), 65536), 512 * 256)
        self.assertIsNone(fp.decode_launch_warp_tiles("  void other(int) (2, 1, 1)x(128, 1, 1)", 65536))

    def test_source_opcode_counts_first_kernel_by_mnemonic(self):
        # (sass, samples, executed, ...): predicates and modifiers dropped; only the first kernel counted
        text = source_block("k", [("IADD3 R1, R2, R3, RZ", 2, 10, 0, 0, 0, 0), ("@!P0 IADD3 R4, R1, 1, RZ", 1, 5, 0, 0, 0, 0),
                                  ("LDS.U.128 R8, [R1]", 3, 7, 0, 0, 0, 0)]) + "\n" + \
            source_block("k2", [("IADD3 R1, R2, R3, RZ", 9, 90, 0, 0, 0, 0)])
        got = fp.source_opcode_counts(text)
        self.assertEqual(dict(got), {"IADD3": [15, 3], "LDS": [7, 3]})
        self.assertEqual(dict(fp.source_opcode_counts("")), {})

    def test_knob_ab_shapes_file_one_shape_a_line(self):
        import knob_ab
        with tempfile.TemporaryDirectory() as d:
            exe, log, shapes = os.path.join(d, "23_paged_kv_decode"), os.path.join(d, "calls"), os.path.join(d, "s.txt")
            write_exe(exe, textwrap.dedent(f"""\
                #!/bin/sh
                echo "$*" >> {log}
                echo "step,idea,problem,time_ms,device"
                echo "23_paged_kv_decode,x,P$4 cache p16 f16,0.01,H100"
                """))
            with open(shapes, "w") as f:
                f.write("# batch, K/V heads\n--batch 2 --page-size 16  # the first\n\n--batch 3\n")
            out = os.path.join(d, "ab.csv")
            with contextlib.redirect_stdout(io.StringIO()):
                knob_ab.main(["--experiment", "e", "--rounds", "1", "--arm", f"a={exe}", "--arm", f"b={exe}",
                              "--shapes", shapes, "--out", out])
            with open(log) as f:
                self.assertEqual(f.read().splitlines(), ["--bench --csv --batch 2 --page-size 16"] * 2 +
                                 ["--bench --csv --batch 3"] * 2)
            with open(shapes, "w") as f:
                f.write("# nothing\n")
            with self.assertRaisesRegex(SystemExit, "no shape in"):
                knob_ab.main(["--experiment", "e", "--arm", f"a={exe}", "--arm", f"b={exe}", "--shapes", shapes,
                              "--out", out])

    def test_partial_rows_after_every_command_then_removed(self):
        import bench
        with tempfile.TemporaryDirectory() as d:
            os.makedirs(os.path.join(d, "bin"))
            for name in ("17_fake", "18_fake"):
                row = dict.fromkeys(fp.BENCH_COLUMNS, "1") | dict(step=name, idea="x", problem="P f16", unit="TFLOP/s")
                write_exe(os.path.join(d, "bin", name), textwrap.dedent(f"""\
                    #!/bin/sh
                    case "$*" in *--help*|*--device-info*) exit 1;; esac
                    echo "{",".join(fp.BENCH_COLUMNS)}"
                    echo "{",".join(row.values())}"
                    """))
            seen = []
            rows, failed = bench.step_rows(bench.step_exes(d, set()), progress=lambda got: seen.append(len(got)))
            self.assertEqual((failed, seen), (0, [1, 2]))
            out = os.path.join(d, "out", "bench.csv")
            with open(os.devnull, "w") as null:
                saved, sys.stdout = sys.stdout, null
                try:
                    code = bench.main(["--build", d, "--no-sdpa", "--out", out, "--no-plot", "--no-render"])
                finally:
                    sys.stdout = saved
            self.assertEqual(code, 0)
            self.assertEqual([r["step"] for r in fp.read_csv(out)], ["17_fake", "18_fake"])
            self.assertFalse(os.path.exists(out + ".partial"))

    def test_randn_needs_out(self):
        import bench
        with self.assertRaises(SystemExit):
            with open(os.devnull, "w") as null:
                saved, sys.stderr = sys.stderr, null
                try:
                    bench.main(["--inputs", "both", "--no-steps", "--no-sdpa"])
                finally:
                    sys.stderr = saved


class FakeTorch:
    """Just enough of torch for the input-drawing paths of bench.py and inputs_ab.py: rand/randn record their
    calls, tensors take the in-place ops, and torch.nn.attention names the backends."""

    def __init__(self):
        import types
        self.calls = []
        fake = self

        class Tensor:
            def __init__(self, shape):
                self.shape = shape

            def mul_(self, x):
                fake.calls.append(("mul_", x))
                return self

            def add_(self, x):
                fake.calls.append(("add_", x))
                return self

            def requires_grad_(self):
                return self

        def draw(name):
            def f(*shape, device=None, dtype=None):
                fake.calls.append((name, shape, dtype))
                return Tensor(shape)
            return f

        self.torch = types.ModuleType("torch")
        self.torch.float16, self.torch.bfloat16 = "f16", "bf16"
        self.torch.rand, self.torch.randn = draw("rand"), draw("randn")
        attention = types.ModuleType("torch.nn.attention")
        attention.SDPBackend = type("SDPBackend", (), {"FLASH_ATTENTION": "flash", "CUDNN_ATTENTION": "cudnn"})
        attention.sdpa_kernel = lambda backend: None
        self.modules = {"torch": self.torch, "torch.nn": types.ModuleType("torch.nn"), "torch.nn.attention": attention}

    def __enter__(self):
        self.saved = {k: sys.modules.get(k) for k in self.modules}
        sys.modules.update(self.modules)
        return self

    def __exit__(self, *exc):
        for k, v in self.saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v


class SdpaInputs(unittest.TestCase):
    """The SDPA input paths without a GPU (a fake torch): each draw as the harness draws, with the signature
    its callers use (a name clash once made bench.draw the plot function, and every SDPA row a TypeError)."""

    def test_draw_input(self):
        import bench
        with FakeTorch() as t:
            bench.draw_input(t.torch, (2, 3), "f16", "uniform", -0.5, 1.5)
            bench.draw_input(t.torch, (2, 3), "bf16", "randn", -0.5, 1.5)
        self.assertEqual(t.calls, [("rand", (2, 3), "f16"), ("mul_", 2.0), ("add_", -0.5), ("randn", (2, 3), "bf16")])

    def test_inputs_ab_sdpa_arm(self):
        import bench
        import inputs_ab as ab
        saved = bench.under_backend
        bench.under_backend = lambda kernel, backend, step, what, refused, fn: (1.5, None)
        try:
            with FakeTorch() as t:
                got = ab.run_sdpa(t.torch, "cudnn", (128, False, 4096, "f16"), "randn", 20, 3, None, set())
        finally:
            bench.under_backend = saved
        self.assertEqual(got, [("sdpa_cudnn", "B4 H16 S4096 D128 f16 randn", 1.5)])
        self.assertEqual(t.calls, [("randn", (4, 16, 4096, 128), "f16")] * 3)

    def test_decode_rows_keep_each_backends_fastest_allocation(self):
        import contextlib
        import types
        import bench
        times = iter([0.02, 0.01, 0.03, 0.05, 0.04, 0.06, 0.2, 0.1, 0.3])  # flash, cuDNN, efficient: 3 draws each
        patched = dict(median_ms=lambda torch, fn, flush, reps, warmup: next(times),
                       under_backend=lambda kernel, backend, step, what, refused, fn: fn(),
                       flush_buffer=lambda torch: None, copy_gbs=lambda torch, flush, reps, warmup: 4000.0,
                       DECODE_BATCHES=(1,), DECODE_KV_HEADS=(8,), DECODE_LENS=(1024,))
        saved = {k: getattr(bench, k) for k in patched}
        for k, v in patched.items():
            setattr(bench, k, v)
        try:
            with FakeTorch() as t:
                t.torch.no_grad = contextlib.nullcontext
                t.torch.cuda = types.SimpleNamespace(get_device_name=lambda i: "GPU")
                t.torch.__version__, t.torch.manual_seed = "0", lambda seed: None
                t.modules["torch.nn"].functional = types.SimpleNamespace(scaled_dot_product_attention=None)
                sys.modules["torch.nn.functional"] = t.modules["torch.nn"].functional
                t.modules["torch.nn.attention"].SDPBackend.EFFICIENT_ATTENTION = "efficient"
                rows = bench.sdpa_decode_rows(t.torch, 20, 3, ("randn",))
        finally:
            sys.modules.pop("torch.nn.functional", None)
            for k, v in saved.items():
                setattr(bench, k, v)
        self.assertEqual([(r["step"], r["time_ms"]) for r in rows],
                         [("sdpa_flash", "0.01"), ("sdpa_cudnn", "0.04"), ("sdpa_efficient", "0.1")])
        self.assertTrue(all("fastest of 3 allocations" in r["idea"] for r in rows))
        self.assertEqual(rows[0]["problem"], "B1 H32 KV8 Sq1 Sk1024 D128 cache f16 randn")
        self.assertEqual([c[0] for c in t.calls], ["randn"] * 9)  # three draws of Q, K and V, all held at once

    def test_no_name_defined_twice(self):
        """A second top-level def of a name silently replaces the first (how the clash above happened)."""
        import ast
        import collections
        import glob
        for path in sorted(glob.glob(os.path.join(HERE, "*.py")) + glob.glob(os.path.join(HERE, "..", "tools", "*.py"))):
            with open(path, encoding="utf-8") as f:
                tree = ast.parse(f.read())
            names = collections.Counter(n.name for n in tree.body
                                        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)))
            self.assertEqual([n for n, c in names.items() if c > 1], [], path)


def table_before_and_after(test, make, write):
    """A results.py block from a CSV in profiles/<gpu>/ (a temporary folder stands in): 'Not measured yet' without
    the file, then the table once write(folder) has put it there."""
    import results
    with tempfile.TemporaryDirectory() as d:
        saved = results.gpu_dir
        results.gpu_dir = lambda gpu=None: d
        try:
            test.assertIn("Not measured yet", make())
            write(d)
            return make()
        finally:
            results.gpu_dir = saved


class GptTable(unittest.TestCase):
    """README's results:gpt block: python/examples/train_gpt.py's CSV summarised per head_dim and attention."""

    def test_not_measured_then_measured(self):
        import results

        def write(d):
            with open(os.path.join(d, "gpt_train.csv"), "w", newline="") as f:
                w = csv.writer(f)
                w.writerow(["attn", "head_dim", "step", "loss", "val_loss", "tokens_per_s", "device"])
                for attn, scale, speed in (("sdpa", 1.0, 1.0e6), ("flashsteps", 1.03, 1.3e6)):
                    for i in range(30):
                        last = i == 29
                        w.writerow([attn, 64, i, 3.0 * scale - 0.01 * i, 2.5 * scale if last else "",
                                    speed if last else "", "GPU"])
        table = table_before_and_after(self, results.gpt_table, write)
        self.assertIn("| 64 | sdpa | 30 |", table)
        self.assertIn("| 64 | flashsteps | 30 |", table)
        self.assertIn("1,300,000", table)
        self.assertIn("**no**", table)  # 3% apart: over the 1% the issue allows


class InputsTable(unittest.TestCase):
    """Doc 19's results:inputs block: profiles/inputs_ab.py's CSV summarised per implementation."""

    def test_not_measured_then_measured(self):
        import results
        import inputs_ab as ab

        def write(d):
            rows = []
            for cell in ("B1 H16 S16384 D128 f16", "B4 H16 S4096 D128 f16"):
                for impl, t_u, t_r, c_u, c_r in ((results.HOPPER_PP, 1.0, 1.03, 1800, 1750),
                                                 ("sdpa_cudnn", 1.0, 1.06, 1800, 1700)):
                    for x, t, c in (("uniform", t_u, c_u), ("randn", t_r, c_r)):
                        rows.append(dict(round=1, cell=cell, impl=impl, inputs=x, problem=cell, time_ms=t,
                                         tflops=600 / t, clock_mhz=c, power_w=700.0, temp_c=60.0, samples="9/9",
                                         flop_per_cycle=1e5 / t / c, sampler="fake", device="GPU"))
            ab.write_records(os.path.join(d, "inputs_ab.csv"), rows)
        table = table_before_and_after(self, results.inputs_table, write)
        self.assertIn(f"| {results.HOPPER_PP} | 2 | 1.030 | 0.972 |", table)
        self.assertIn("| sdpa_cudnn | 2 | 1.060 | 0.944 |", table)
        self.assertIn("uniform 1.000× over 2 cells; randn 1.029× over 2 cells", table)


class InputsAb(unittest.TestCase):
    """profiles/inputs_ab.py without a GPU: its arguments, plan, sample windows and summary maths."""

    def test_defaults_and_plan(self):
        import inputs_ab as ab
        a = ab.parse_args([])
        self.assertTrue(a.step[0].endswith("build/bin/19_hopper_pingpong_overlap"))
        self.assertEqual((a.dims, a.seqs, a.causal, a.dtypes, a.sdpa, a.rounds), ([128, 64], [16384, 4096], "both",
                                                                                 ["f16", "bf16"], ["flash", "cudnn"], 2))
        arms = ab.plan(a)
        self.assertEqual(len(arms), 16 * 2 * 3 * 2)
        # within a cell and round every implementation runs both inputs, uniform first in odd rounds
        first = [(rnd, kind, x) for cell, rnd, kind, _, x in arms[:12]]
        self.assertEqual(first[:2], [(1, "step", "uniform"), (1, "step", "randn")])
        self.assertEqual(first[6:8], [(2, "step", "randn"), (2, "step", "uniform")])
        self.assertLess(ab.estimate_s(a, arms), 300)  # the GPU call's budget: about 4 minutes
        self.assertEqual(ab.cell_name((128, True, 16384, "bf16")), "B1 H16 S16384 D128 causal bf16")
        self.assertEqual(ab.cell_flop((64, False, 4096, "f16")), 4.0 * 4 * 32 * 4096 * 4096 * 64)
        self.assertEqual(ab.arm_reps((128, False, 16384, "f16"), 20, 500), 114)  # 2.2 TFLOP at 500 TFLOP/s: 4.4 ms
        self.assertEqual(ab.arm_reps((128, False, 16384, "f16"), 200, 500), 200)
        b = ab.parse_args(["--no-steps", "--sdpa", "cudnn", "--dims", "64", "--causal", "no", "--rounds", "3"])
        self.assertEqual(b.step, [])
        self.assertEqual(len(ab.plan(b)), 2 * 2 * 3 * 2)  # 2 seqs x 2 dtypes, 3 rounds, 1 implementation, 2 inputs
        for bad in (["--reps", "5"], ["--rounds", "0"], ["--no-steps", "--sdpa"], ["--dtypes", "f32"]):
            with self.assertRaises(SystemExit, msg=bad):
                with open(os.devnull, "w") as null:
                    saved, sys.stderr = sys.stderr, null
                    try:
                        ab.parse_args(bad)
                    finally:
                        sys.stderr = saved

    def test_smi_lines_and_windows(self):
        import inputs_ab as ab
        t, mhz, w, c = ab.parse_smi_line("2026/11/27 07:00:05.250, 1980, 650.5, 55\n")
        self.assertEqual((mhz, w, c), (1980.0, 650.5, 55.0))
        self.assertAlmostEqual(t - ab.parse_smi_line("2026/11/27 07:00:05.000, 1, 1, 1")[0], 0.25, places=3)
        for bad in ("timestamp, clocks.current.sm [MHz], power.draw [W], temperature.gpu", "2026/11/27 07:00:05.000, "
                    "[N/A], 1, 1", "1, 2, 3"):
            self.assertIsNone(ab.parse_smi_line(bad))
        # idle at 100 W before t=10; an arm 10..11 with set-up samples at 120 W and busy ones at 600-700 W
        samples = [(t / 10, 1980.0, 100.0, 40.0) for t in range(0, 100, 2)] + \
                  [(10.0, 1980.0, 120.0, 41.0), (10.2, 1755.0, 600.0, 50.0), (10.4, 1695.0, 700.0, 52.0),
                   (11.5, 1980.0, 700.0, 60.0)]
        idle = ab.idle_power(samples, 10.0)
        self.assertEqual(idle, 100.0)
        mhz, w, c, n = ab.window_means(samples, 10.0, 11.0, idle)  # busy: >= 100 + (700 - 100) / 2 = 400 W
        self.assertEqual((mhz, w, c, n), (1725.0, 650.0, 51.0, "2/3"))
        self.assertEqual(ab.window_means(samples, 10.0, 11.0)[3], "3/3")  # no idle power: every sample
        self.assertEqual(ab.window_means(samples, 20.0, 21.0), (None, None, None, "0/0"))
        self.assertAlmostEqual(ab.flop_per_cycle(2e12, 4.0, 1600.0), 2e12 / (4e-3 * 1.6e9))
        self.assertIsNone(ab.flop_per_cycle(2e12, 4.0, None))

    def test_summary_tells_a_clock_effect_from_a_work_effect(self):
        import inputs_ab as ab
        def rec(impl, x, rnd, ms, mhz, watts=600.0):
            return dict(round=rnd, cell="C", impl=impl, inputs=x, time_ms=ms, tflops=1000.0 / ms, clock_mhz=mhz,
                        power_w=watts, flop_per_cycle=ab.flop_per_cycle(4e12, ms, mhz))
        recs = [  # "clocked": randn 10% slower, at a clock 10% lower (the same work per cycle);
                  # "work": randn 10% slower at the same clock (less work per cycle)
            rec("clocked", "uniform", 1, 4.0, 1980), rec("clocked", "randn", 1, 4.4, 1800, 690),
            rec("clocked", "randn", 2, 4.4, 1800, 690), rec("clocked", "uniform", 2, 4.0, 1980),
            rec("work", "uniform", 1, 4.0, 1980), rec("work", "randn", 1, 4.4, 1980),
            rec("only_uniform", "uniform", 1, 4.0, None)]
        s = {x["impl"]: x for x in ab.summarize(recs)}
        self.assertAlmostEqual(s["clocked"]["time_ratio"], 1.1)
        self.assertAlmostEqual(s["clocked"]["clock_ratio"], 1800 / 1980)
        self.assertAlmostEqual(s["clocked"]["fpc_ratio"], (4.0 * 1980) / (4.4 * 1800))  # 1.0: the clock explains it
        self.assertAlmostEqual(s["clocked"]["fpc_ratio"], 1.0)
        self.assertAlmostEqual(s["clocked"]["power_w_randn"], 690)
        self.assertAlmostEqual(s["work"]["clock_ratio"], 1.0)
        self.assertAlmostEqual(s["work"]["fpc_ratio"], 1 / 1.1)
        self.assertIsNone(s["only_uniform"]["time_ratio"])
        over = ab.overall(ab.summarize(recs))
        self.assertAlmostEqual(over["clocked"][2], 1.0)
        self.assertEqual(over["work"][3], 1)
        text = ab.format_summary(ab.summarize(recs))
        self.assertIn("SUMMARY clocked: time 1.100, clock 0.909, FLOP/cycle 1.000 over 1 cells", text)
        self.assertIn("SUMMARY only_uniform: time -, clock -, FLOP/cycle - over 1 cells", text)

    def test_records_csv(self):
        import inputs_ab as ab
        recs = [dict(round=1, cell="C", impl="sdpa_cudnn", inputs="randn", problem="C randn", time_ms=4.0,
                     tflops=550.123456789, flop=2.2e12, t0=0.0, t1=1.0, device="GPU")]
        ab.add_clocks(recs, [(0.5, 1800.0, 650.0, 50.0)], None, "nvidia-smi power.draw.instant")
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "ab.csv")
            ab.write_records(path, recs)
            ab.write_records(path, recs)  # appended: one header
            rows = fp.read_csv(path)
        self.assertEqual(len(rows), 2)
        self.assertEqual(list(rows[0]), ab.COLUMNS)
        self.assertEqual((rows[0]["clock_mhz"], rows[0]["tflops"], rows[0]["samples"]), ("1800", "550.123", "1/1"))


class PtxasParse(unittest.TestCase):
    """ptxas.parse reads registers, spills, stack and static shared memory, with or without a stack frame."""

    def test_static_smem_after_a_cumulative_stack(self):
        import ptxas
        log = textwrap.dedent("""\
            /usr/local/cuda/bin/nvcc -x cu -c /x/steps/16_deterministic_backward/kernel.cu -o k.o
            ptxas info    : Compiling entry function '_Z1av' for 'sm_90a'
            ptxas info    : Function properties for _Z1av
                112 bytes stack frame, 120 bytes spill stores, 140 bytes spill loads
            ptxas info    : Used 255 registers, used 1 barriers, 112 bytes cumulative stack size, 16 bytes smem
            ptxas info    : Compiling entry function '_Z1bv' for 'sm_90a'
            ptxas info    : Function properties for _Z1bv
                0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
            ptxas info    : Used 30 registers, used 1 barriers, 8 bytes smem
            """)
        rows, arch = ptxas.parse(log)
        self.assertEqual(arch, "sm_90a")
        got = [(r["registers"], r["spill_stores"], r["spill_loads"], r["stack"], r["static_smem"]) for r in rows]
        self.assertEqual(got, [(255, 120, 140, 112, 16), (30, 0, 0, 0, 8)])


class CommittedData(unittest.TestCase):
    def test_compare_01_02(self):
        text, ok = fp.compare_report(["01_safe_softmax", "02_online_softmax"], markdown=True)
        self.assertTrue(ok)
        self.assertIn("| DRAM read (MB) |", text)
        self.assertIn("64x4194304", text)

    def test_moved_names_known_steps(self):
        shapes = {(s, f) for s, f in fp.read_shapes()}
        for m in fp.read_moved():
            self.assertIn((m["step"], m["shape"]), shapes, f"moved.txt: {m['step']} is not captured at {m['shape']}")
            if m["prev"]:
                self.assertIn((m["prev"], m["prev_shape"]), shapes,
                              f"moved.txt: {m['prev']} is not captured at {m['prev_shape']}")

    def test_bench_schema(self):
        with open(os.path.join(fp.gpu_dir(), "bench.csv"), newline="") as f:
            self.assertEqual(next(csv.reader(f)), fp.BENCH_COLUMNS)


if __name__ == "__main__":
    unittest.main()
