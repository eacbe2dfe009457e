#!/usr/bin/env python3
"""tools/figures.py: the docs' figures, drawn from the constants the kernels use and from the committed
measurements (never drawn by hand).

    python3 tools/figures.py          # (re)write docs/figures/*.svg
    python3 tools/figures.py --check  # redraw in memory; exit 1 if a committed figure differs (a CPU test)

  causal_tiles     step 06: the causal tile grid of one head (full, diagonal, skipped), with the
                   tile sizes of step 06's head_dim-64 instance read from its kernel.cu
  mma_fragments    step 09: which lane holds which element of mma.m16n8k16's A, B and C fragments
                   (the PTX ISA's layout, as the kernels index it: g = lane / 4, t = lane % 4)
  swizzle_banks    step 10: the 16-byte chunk positions of 8 rows before and after the XOR swizzle
                   (device/cp_async.cuh's swz), and the banks an ldmatrix phase hits
  split_combine    step 22: one sequence's keys in splits, each a partial (O_c, LSE_c), merged
  decode_bandwidth step 22's decode sweep and SDPA's: % of the copy bandwidth over the K/V bytes read
  wgmma_operand    step 17: a K-major 128-byte-swizzled operand tile: core matrices, the descriptor's SBO and LBO,
                   the swizzle, the start address per k-step (numbers read from its kernel.cu)
  backward_roles   step 21: its warp roles over three query tiles, from its Config's and barriers' constants
  backward_pingpong step 25: three query tiles in lockstep (step 24) and in ping-pong, ideal durations from doc 25's
                   napkin arithmetic (peak rates) and step 25's query tile
  climb            every attention forward step's TFLOP/s at one shape from profiles/h100/bench.csv,
                   beside SDPA's two backends and the card's peaks

SVG with fixed ids and no date, so a redraw is byte-identical with the same matplotlib (CI and this
tree use Debian's python3-matplotlib; docs/figures/matplotlib_version.txt names the version that drew
them). Another matplotlib lays paths out differently, so there --check compares what the figures say
instead: every figure's text labels, in order (the numbers, names and sizes drawn from the kernels and
the measurements). Without matplotlib: says so and exits 77 (the test skips).
"""
import csv
import io
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "docs", "figures")
SKIP = 77

try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle
except ImportError:
    plt = None

COLORS = {"full": "#4c9be8", "diagonal": "#f2a541", "skipped": "#e6e6e6", "accent": "#d1495b", "grey": "#777777"}


def read(rel):
    with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
        return f.read()


def new_figure(w, h):
    fig = plt.figure(figsize=(w, h))
    return fig


def diagram(w, h, ymax, top=0.9):
    """A schematic: a figure of w × h inches, one frameless axes of x 0..100 and y 0..ymax."""
    fig = new_figure(w, h)
    ax = fig.add_axes([0.02, 0.02, 0.96, top])
    ax.axis("off"), ax.set_xlim(0, 100), ax.set_ylim(0, ymax)
    return fig, ax


# ---- step 06: the causal tile grid ----------------------------------------------------------------
def causal_tiles():
    # The head_dim-64 instance's tiles, from step 06's banner ("BLOCK_M 128, BLOCK_N 64").
    m = re.search(r"instance 64\):\s+BLOCK_M (\d+), BLOCK_N (\d+)", read("steps/06_causal_stages/kernel.cu"))
    bm, bn = int(m.group(1)), int(m.group(2))
    seq = 1024
    fig = new_figure(6.4, 3.9)
    ax = fig.add_axes([0.1, 0.13, 0.62, 0.77])
    rows, cols = seq // bm, seq // bn
    counts = {"full": 0, "diagonal": 0, "skipped": 0}
    for i in range(rows):
        for j in range(cols):
            q0, q1, k0, k1 = i * bm, (i + 1) * bm - 1, j * bn, (j + 1) * bn - 1
            kind = "full" if k1 <= q0 else "skipped" if k0 > q1 else "diagonal"
            counts[kind] += 1
            ax.add_patch(Rectangle((j, rows - 1 - i), 1, 1, facecolor=COLORS[kind], edgecolor="white", lw=1.5))
    ax.plot([0, cols], [rows, 0], color="black", lw=1, ls="--")
    ax.set_xlim(0, cols), ax.set_ylim(0, rows)
    ax.set_xticks([j + 0.5 for j in range(cols)], [str(j) for j in range(cols)], fontsize=7)
    ax.set_yticks([rows - 1 - i + 0.5 for i in range(rows)], [str(i) for i in range(rows)], fontsize=7)
    ax.set_xlabel(f"key tile ({bn} keys)"), ax.set_ylabel(f"query block ({bm} rows)")
    ax.set_title(f"Causal tiles of one head, seq {seq} (step 06, head_dim ≤ 64)", fontsize=9)
    ax.set_aspect(bm / bn)
    lx = fig.add_axes([0.74, 0.3, 0.25, 0.4])
    lx.axis("off")
    for k, (kind, text) in enumerate([("full", "every key visible:\nno mask"), ("diagonal", "on the diagonal:\nmasked"),
                                      ("skipped", "above it:\nnever loaded")]):
        lx.add_patch(Rectangle((0, 2 - k), 0.25, 0.6, facecolor=COLORS[kind]))
        lx.text(0.32, 2.3 - k, f"{text}\n{counts[kind]} tiles", va="center", fontsize=7.5)
    lx.set_xlim(0, 1.5), lx.set_ylim(-0.2, 3)
    return fig


# ---- step 09: mma.m16n8k16 fragments ----------------------------------------------------------------
def mma_fragments():
    fig = new_figure(9.6, 4.3)
    panels = [("A (16 × 16, row-major): registers a0..a3", 16, 16,
               lambda lane, r: [(lane // 4 + 8 * (r // 2 % 2), 2 * (lane % 4) + r % 2 + 8 * (r // 4))]),
              ("B (16 × 8, k × n): b0, b1", 16, 8,
               lambda lane, r: [(2 * (lane % 4) + r % 2 + 8 * (r // 2), lane // 4)]),
              ("C, D (16 × 8, fp32): c0..c3", 16, 8,
               lambda lane, r: [(lane // 4 + 8 * (r // 2), 2 * (lane % 4) + r % 2)])]
    regs = [8, 4, 4]  # 16-bit elements of A and B (two per register), floats of C
    widths = [0.4, 0.2, 0.2]
    left = 0.04
    for (title, nr, nc, where), n_regs, w, name, packed in zip(panels, regs, widths, "abc", (True, True, False)):
        ax = fig.add_axes([left, 0.05, w, 0.82])
        left += w + 0.06
        label = {}
        for lane in range(32):
            for r in range(n_regs):
                for (y, x) in where(lane, r):
                    label[(y, x)] = (lane, r)
        for (y, x), (lane, r) in label.items():
            shade = 0.93 - 0.5 * (lane % 4) / 3 if (lane // 4) % 2 == 0 else 0.85 - 0.4 * (lane % 4) / 3
            face = (shade, shade, 1.0) if lane != 0 else COLORS["diagonal"]
            ax.add_patch(Rectangle((x, nr - 1 - y), 1, 1, facecolor=face, edgecolor="white", lw=0.8))
            reg = f"{name}{r // 2}" if packed else f"{name}{r}"
            ax.text(x + 0.5, nr - 1 - y + 0.5, f"L{lane}\n{reg}", ha="center", va="center", fontsize=6, linespacing=1.0)
        ax.set_xlim(0, nc), ax.set_ylim(0, nr)
        ax.set_xticks([]), ax.set_yticks([])
        ax.set_aspect("equal")
        ax.set_title(title, fontsize=8)
    fig.suptitle("mma.m16n8k16 (step 09): the lane and register holding each element (A, B: two 16-bit values "
                 "per register); lane 0 highlighted", fontsize=8, y=0.99)
    return fig


# ---- step 10: the swizzle -----------------------------------------------------------------------------
def swizzle_banks():
    fig = new_figure(8.4, 3.6)
    for p, (title, swizzled) in enumerate([("plain: chunk c at position c", False),
                                           ("swizzled: chunk c at position c XOR (row mod 8)", True)]):
        ax = fig.add_axes([0.05 + 0.49 * p, 0.13, 0.42, 0.7])
        for r in range(8):
            for c in range(8):
                pos = c ^ (r & 7) if swizzled else c
                hit = c == 0  # the chunk column an ldmatrix phase reads in all 8 rows
                face = COLORS["accent"] if hit else "#dbe9f6"
                ax.add_patch(Rectangle((pos, 7 - r), 1, 1, facecolor=face, edgecolor="white", lw=1.2))
                ax.text(pos + 0.5, 7 - r + 0.5, f"c{c}", ha="center", va="center", fontsize=6.5,
                        color="white" if hit else "black")
        ax.set_xlim(0, 8), ax.set_ylim(0, 8)
        ax.set_xticks([i + 0.5 for i in range(8)], [f"{4 * i}-{4 * i + 3}" for i in range(8)], fontsize=6)
        ax.set_yticks([7 - r + 0.5 for r in range(8)], [str(r) for r in range(8)], fontsize=7)
        ax.set_xlabel("position in the 128-byte row: banks"), ax.set_ylabel("row")
        banks = len({(c ^ (r & 7)) if swizzled else 0 for r in range(8) for c in [0]})
        ax.set_title(f"{title}\nchunk c0 of 8 rows: {banks} bank group{'s' if banks > 1 else ''} "
                     f"({'conflict-free' if banks == 8 else '8-way conflict'})", fontsize=8)
        ax.set_aspect("equal")
    return fig


# ---- step 22: split and combine -------------------------------------------------------------------------
def split_combine():
    fig, ax = diagram(8.0, 3.0, 40)
    chunks = 4  # doc 22's chunks c = 1..C, one block each
    centres = [4 + s * 18 + 8.5 for s in range(chunks)]
    mid = sum(centres) / chunks  # the combine box and the arrows' meeting point: centred under the blocks
    for s, xc in enumerate(centres):
        c = s + 1
        ax.add_patch(Rectangle((xc - 8.5, 28), 17, 6, facecolor=COLORS["full"], edgecolor="white"))
        ax.text(xc, 31, f"keys of chunk {c}", ha="center", va="center", fontsize=7, color="white")
        ax.add_patch(Rectangle((xc - 6.5, 14), 13, 7, facecolor="#dbe9f6", edgecolor=COLORS["full"]))
        ax.text(xc, 17.5, f"block {c}:\nO_{c}, LSE_{c} (fp32)", ha="center", va="center", fontsize=6.5)
        ax.annotate("", xy=(xc, 21), xytext=(xc, 28), arrowprops=dict(arrowstyle="->", lw=0.8))
        ax.annotate("", xy=(mid, 8), xytext=(xc, 14), arrowprops=dict(arrowstyle="->", lw=0.8, color=COLORS["grey"]))
    ax.add_patch(Rectangle((76, 28), 18, 6, facecolor=COLORS["skipped"], edgecolor="white"))
    ax.text(85, 31, "past the length:\nnever read", ha="center", va="center", fontsize=6.5)
    ax.add_patch(Rectangle((mid - 34, 1), 68, 7, facecolor=COLORS["diagonal"], edgecolor="white"))
    ax.text(mid, 4.5, "combine: LSE = ln Σ_c exp(LSE_c),  O = Σ_c exp(LSE_c − LSE)·O_c", ha="center", va="center",
            fontsize=7)
    ax.text(4, 37.5, "one (sequence, K/V head): its G·seq_q query rows against keys [0, len), cut into chunks (step 22)",
            fontsize=7.5)
    return fig


# ---- step 10: the cp.async ring ---------------------------------------------------------------------------------
def ring_timeline():
    stages = int(re.search(r"constexpr int STAGES = (\d+);", read("steps/10_swizzle_pipeline_forward/kernel.cu")).group(1))
    tiles = 8
    fig = new_figure(8.4, 2.9)
    ax = fig.add_axes([0.12, 0.18, 0.85, 0.68])
    # Tile t's copies are issued when tile t - (STAGES - 1) starts, or in the prologue (drawn as the unit
    # before time 0, which ends when copy 0 has landed) for t <= STAGES - 2, and must have landed when tile t
    # starts; compute of tile t takes one unit.
    for t in range(tiles):
        issue = t - (stages - 1) if t >= stages - 1 else -1
        slot = t % stages
        ax.add_patch(Rectangle((issue, stages - 1 - slot + 0.15), t - issue, 0.7,
                               facecolor=COLORS["full"], alpha=0.45, edgecolor=COLORS["full"]))
        ax.text(issue + 0.08, stages - 1 - slot + 0.5, f"copy {t}", va="center", fontsize=6.5)
        ax.add_patch(Rectangle((t, -1.35), 1, 0.7, facecolor=COLORS["diagonal"], edgecolor="white"))
        ax.text(t + 0.5, -1.0, f"tile {t}", ha="center", va="center", fontsize=6.5)
        ax.add_patch(Rectangle((t, stages - 1 - slot + 0.15), 1, 0.7, facecolor="none", edgecolor=COLORS["accent"],
                               lw=1.2, ls="--"))
    ax.add_patch(Rectangle((-1, -1.35), 1, 0.7, facecolor=COLORS["skipped"], edgecolor="white"))
    ax.text(-0.5, -1.0, "prologue", ha="center", va="center", fontsize=6.5)
    ax.set_xlim(-1, tiles + 0.2), ax.set_ylim(-1.6, stages)
    ax.set_yticks([stages - 1 - s + 0.5 for s in range(stages)] + [-1.0],
                  [f"slot {s}" for s in range(stages)] + ["compute"], fontsize=7)
    ax.set_xticks(range(tiles + 1)), ax.tick_params(axis="x", labelsize=7)
    ax.set_xlabel("time, in tiles of compute")
    ax.set_title(f"Step 10's K/V ring, STAGES = {stages}: tile t's copies (blue) fly while tiles t − {stages - 1} .. "
                 f"t − 1 compute; dashed: the slot being read", fontsize=8.5)
    return fig


# ---- step 17: the wgmma accumulator and the mbarrier's phases ---------------------------------------------------
def wgmma_accumulator():
    fig = new_figure(9.0, 5.0)
    cols = 16  # the first 16 of the N columns: the pattern repeats every 8
    warp_colors = ["#dbe9f6", "#fde2c3", "#d8f0d2", "#f6d5da"]
    # Left: the warpgroup's 64 rows, a band of 16 per warp.
    mx = fig.add_axes([0.05, 0.1, 0.04, 0.8])
    for w in range(4):
        mx.add_patch(Rectangle((0, 63 - 16 * w - 15), 1, 16, facecolor=warp_colors[w], edgecolor="white", lw=1))
        mx.text(0.5, 63 - 16 * w - 7, f"warp {w}", rotation=90, ha="center", va="center", fontsize=7)
    mx.set_xlim(0, 1), mx.set_ylim(0, 64), mx.set_xticks([])
    mx.set_yticks([64 - 16 * w for w in range(4)], [str(16 * w) for w in range(4)], fontsize=7)
    mx.set_ylabel("row of the warpgroup's 64"), mx.set_title("all 64 rows", fontsize=8)
    # Middle: warp 0's 16 rows. Register i of lane l (g = l/4, q = l%4) holds row 16·w + g + 8·((i/2) % 2),
    # column 8·(i/4) + 2·q + i % 2 (device/hopper.cuh); here w = 0.
    ax = fig.add_axes([0.15, 0.1, 0.56, 0.8])
    w = 0
    for lane in range(32):
        g, q = lane // 4, lane % 4
        for i in range(cols // 2):
            r, c = 16 * w + g + 8 * ((i // 2) % 2), 8 * (i // 4) + 2 * q + i % 2
            ax.add_patch(Rectangle((c, 15 - r), 1, 1, facecolor=warp_colors[w], edgecolor="white", lw=0.6))
            ax.text(c + 0.5, 15 - r + 0.5, f"L{lane}\nr{i}", ha="center", va="center", fontsize=6, linespacing=1.0)
    ax.set_xlim(0, cols), ax.set_ylim(0, 16)
    ax.set_xticks([c + 0.5 for c in range(0, cols, 2)], [str(c) for c in range(0, cols, 2)], fontsize=7)
    ax.set_yticks([15.5 - r for r in range(0, 16, 2)], [str(r) for r in range(0, 16, 2)], fontsize=7)
    ax.set_xlabel("accumulator column"), ax.set_ylabel("row")
    ax.set_title("warp 0: rows 0-15, first 16 columns (Lk rI: lane k, register I)", fontsize=8)
    lx = fig.add_axes([0.73, 0.1, 0.26, 0.8])
    lx.axis("off")
    lx.text(0, 1, "Register i of lane l (g = l/4, q = l mod 4)\nof warp w holds\n"
            "  row 16·w + g + 8·((i/2) mod 2),\n  column 8·(i/4) + 2·q + i mod 2:\n"
            "the mma.sync C fragment of step 09,\none per warp and 8 columns.\n\n"
            "Warps 1, 2, 3 hold rows 16-31, 32-47,\n48-63 the same way: the same lane\nand register, 16·w rows lower.\n"
            "Columns 8 and up repeat columns 0-7\nwith registers 4 higher per 8 columns.",
            fontsize=7, va="top", transform=lx.transAxes)
    fig.suptitle("wgmma m64nNk16: the fp32 accumulator of a warpgroup (4 warps, N/2 registers per thread)",
                 fontsize=8.5, y=0.985)
    return fig


def mbarrier_phases():
    fig = new_figure(8.4, 3.2)
    ax = fig.add_axes([0.15, 0.2, 0.82, 0.65])
    rows = ["thread 0", "TMA", "barrier phase", "consumers"]
    ys = {name: len(rows) - 1 - i for i, name in enumerate(rows)}
    events = []
    for fill in range(3):  # three fills of one ring slot (every STAGES tiles)
        x0 = fill * 3.0
        parity = fill % 2
        ax.add_patch(Rectangle((x0, ys["thread 0"] + 0.2), 0.5, 0.6, facecolor=COLORS["full"]))
        ax.text(x0 + 0.25, ys["thread 0"] + 0.5, "arrive\nexpect_tx", ha="center", va="center", fontsize=5.5, color="white")
        ax.add_patch(Rectangle((x0 + 0.5, ys["TMA"] + 0.2), 1.0, 0.6, facecolor=COLORS["diagonal"]))
        ax.text(x0 + 1.0, ys["TMA"] + 0.5, "bytes land\n(complete_tx)", ha="center", va="center", fontsize=5.5)
        ax.add_patch(Rectangle((x0, ys["barrier phase"] + 0.2), 1.5, 0.6, facecolor="#eeeeee", edgecolor=COLORS["grey"]))
        ax.text(x0 + 0.75, ys["barrier phase"] + 0.5, f"phase {fill}: pending", ha="center", va="center", fontsize=5.5)
        ax.add_patch(Rectangle((x0 + 1.5, ys["barrier phase"] + 0.2), 1.5, 0.6, facecolor="#d8f0d2", edgecolor=COLORS["grey"]))
        ax.text(x0 + 2.25, ys["barrier phase"] + 0.5, f"phase {fill} done", ha="center", va="center", fontsize=5.5)
        ax.add_patch(Rectangle((x0 + 0.1, ys["consumers"] + 0.2), 1.4, 0.6, facecolor="none", edgecolor=COLORS["accent"], ls="--"))
        ax.text(x0 + 0.8, ys["consumers"] + 0.5, f"wait(parity {parity})", ha="center", va="center", fontsize=5.5)
        ax.add_patch(Rectangle((x0 + 1.5, ys["consumers"] + 0.2), 1.2, 0.6, facecolor=COLORS["accent"]))
        ax.text(x0 + 2.1, ys["consumers"] + 0.5, "read the slot", ha="center", va="center", fontsize=5.5, color="white")
    ax.set_xlim(0, 9), ax.set_ylim(0, len(rows))
    ax.set_yticks([ys[r] + 0.5 for r in rows], rows, fontsize=7)
    ax.set_xticks([])
    ax.set_xlabel("time: three fills of one ring slot")
    ax.set_title("Step 17's mbarrier: a fill completes a phase when its arrival and all its bytes are in; "
                 "waiters pass by the phase's parity (0, 1, 0, ...)", fontsize=8)
    return fig


def wgmma_operand():
    """A K-major, 128-byte-swizzled wgmma operand in shared memory (step 17's Q and K boxes), with the descriptor's
    numbers read from steps/17_hopper_forward/kernel.cu: SBO, the LBO it passes, the bytes per k-step."""
    src = read("steps/17_hopper_forward/kernel.cu")
    rows_per_period, row_bytes = map(int, re.search(r"kSbo = (\d+) \* (\d+);", src).groups())
    sbo = rows_per_period * row_bytes
    lbo = int(re.search(r"smem_desc\(a, (\d+), kSbo\)", src).group(1))
    kstep = int(re.search(r"\(kk % 4\) \* (\d+);", src).group(1))  # bytes per k-step of 16 elements
    vlbo = re.search(r"kVLbo = (\w+ \* \d+);", src).group(1).replace(" * ", "·")  # V's LBO, as the kernel writes it
    chunks, rows = row_bytes // 16, 2 * rows_per_period  # 16-byte chunks per row; two 8-row groups drawn
    steps = row_bytes // kstep  # k-steps per 128-byte row (one box of 64 elements)
    kcolors = ["#4c9be8", "#f2a541", "#6cc070", "#c58bd6"]
    fig = new_figure(10.0, 5.2)
    for p, swizzled in enumerate([False, True]):
        ax = fig.add_axes([0.10 + 0.34 * p, 0.17, 0.28, 0.66])
        for r in range(rows):
            for c in range(chunks):  # logical chunk c of row r: elements 8c .. 8c + 7, k-step c // (kstep / 16)
                pos = c ^ (r % rows_per_period) if swizzled else c
                k = c // (kstep // 16)
                ax.add_patch(Rectangle((pos, rows - 1 - r), 1, 1, facecolor=kcolors[k % len(kcolors)],
                                       edgecolor="white", lw=1))
                ax.text(pos + 0.5, rows - 1 - r + 0.5, f"c{c}", ha="center", va="center", fontsize=6)
        if not swizzled:  # the core matrices: one chunk column of one 8-row group
            for g in range(rows // rows_per_period):
                for c in range(chunks):
                    ax.add_patch(Rectangle((c, rows - rows_per_period * (g + 1)), 1, rows_per_period, facecolor="none",
                                           edgecolor="black", lw=1.1))
            ax.annotate("", xy=(-1.0, rows - rows_per_period), xytext=(-1.0, rows),
                        arrowprops=dict(arrowstyle="<->", lw=1.2, color=COLORS["accent"]), annotation_clip=False)
            ax.text(-1.2, rows - rows_per_period / 2, f"SBO = {sbo} B\n({rows_per_period} rows × {row_bytes} B)",
                    rotation=90, ha="right", va="center", fontsize=7, color=COLORS["accent"])
            ax.annotate("", xy=(kstep // 16, rows + 0.3), xytext=(0, rows + 0.3),
                        arrowprops=dict(arrowstyle="->", lw=1.2, color=COLORS["accent"]), annotation_clip=False)
            ax.text(kstep // 16 + 0.2, rows + 0.3, f"next k-step: start + {kstep} B", ha="left", va="center",
                    fontsize=7, color=COLORS["accent"])
        ax.set_xlim(0, chunks), ax.set_ylim(0, rows)
        ax.set_xticks([i + 0.5 for i in range(chunks)], [f"{16 * i}" for i in range(chunks)], fontsize=6)
        ax.set_yticks([rows - 1 - r + 0.5 for r in range(rows)], [str(r) for r in range(rows)], fontsize=6)
        ax.set_xlabel("byte offset of the 16-byte position in the row" if swizzled else
                      "byte offset in the logical row (chunk c: elements 8c .. 8c+7)", fontsize=7)
        if swizzled:  # the left panel's margin holds SBO instead
            ax.set_ylabel("row (of M for A, of N for B)", fontsize=7, labelpad=1)
        ax.set_title("where each chunk is stored: chunk c of row r\nat position c XOR (r mod 8)" if swizzled else
                     f"logical: {rows} of the rows, {chunks} chunks of 16 B each;\n"
                     f"black: core matrices (8 rows × 16 B)", fontsize=8, pad=16 if not swizzled else 6)
        ax.set_aspect("equal")
    lx = fig.add_axes([0.76, 0.17, 0.23, 0.66])
    lx.axis("off")
    lx.text(0, 1, f"The descriptor of k-step kk\n(smem_desc in device/hopper.cuh):\n\n"
            f"  start = tile + {kstep}·(kk mod {steps})\n"
            f"     (+ rows·{row_bytes} B for the second\n      box, kk ≥ {steps}: d = 128)\n"
            f"  LBO = {lbo} B: unused here; the\n     k-step's two core matrices are\n"
            f"     neighbours in one {row_bytes}-byte row\n"
            f"     (V, MN-major: LBO = {vlbo} B,\n      from dims 0-63 to dims 64-127)\n"
            f"  SBO = {sbo} B: from one 8-row group\n     of core matrices to the next\n"
            f"  swizzle = 1 (128 B), base offset 0:\n     the tile starts on a {sbo}-byte\n     boundary\n\n"
            f"The start names the logical, unswizzled\nposition; the hardware applies the XOR\n"
            f"within each {sbo}-byte period, as TMA\ndid when it wrote the tile.",
            fontsize=7, va="top", transform=lx.transAxes, family="DejaVu Sans Mono")
    fig.legend([Rectangle((0, 0), 1, 1, facecolor=kcolors[k]) for k in range(steps)],
               [f"k-step {k}: elements {16 * k}-{16 * k + 15}, bytes {kstep * k}-{kstep * k + kstep - 1}" for k in range(steps)],
               loc="lower center", ncol=2, fontsize=7, frameon=False, bbox_to_anchor=(0.4, 0.0))
    fig.suptitle(f"A K-major wgmma operand in shared memory, 128-byte swizzle (step 17's Q and K boxes: rows of "
                 f"{row_bytes // 2} fp16/bf16 elements)", fontsize=9, y=0.985)
    return fig


# ---- step 19: ping-pong -----------------------------------------------------------------------------------------
def pingpong_timeline():
    fig = new_figure(8.6, 3.0)
    ax = fig.add_axes([0.13, 0.24, 0.85, 0.6])
    # Schematic durations: a consumer's pair of products (S_j = Q·K_jᵀ and P_{j-1}·V_{j-1}, issued in one turn), then
    # the softmax of S_j, which the compiled code starts only once both products are done (doc 19, "What ptxas made
    # of it"). Ideal: no hand-over cost and no latency, so the drawn pipe has no gap; the measured one has (ncu).
    gemm, soft = 2.0, 1.6
    gemm_colors = [COLORS["full"], "#2f5f9e"]  # consumer 0's GEMMs, consumer 1's: in its row and on the pipe
    end = 0
    for cg in range(2):
        t = cg * gemm
        for tile in range(4):
            for y in (1 - cg + 0.15, -0.85):  # its row, and the tensor pipe's
                ax.add_patch(Rectangle((t, y), gemm, 0.7 if y > 0 else 0.5, facecolor=gemm_colors[cg],
                                       edgecolor="white"))
            pair = f"S{tile}" if tile == 0 else f"S{tile}, PV{tile - 1}"  # S_j and P_{j-1}·V_{j-1}, one turn
            ax.text(t + gemm / 2, 1 - cg + 0.5, pair, ha="center", va="center", fontsize=6.5, color="white")
            ax.text(t + gemm / 2, -0.6, f"c{cg}: {pair}", ha="center", va="center", fontsize=6.5, color="white")
            ax.add_patch(Rectangle((t + gemm, 1 - cg + 0.15), soft, 0.7, facecolor=COLORS["diagonal"], edgecolor="white"))
            ax.text(t + gemm + soft / 2, 1 - cg + 0.5, f"softmax S{tile}", ha="center", va="center", fontsize=6.5)
            end = max(end, t + gemm + soft)
            t += 2 * gemm  # its next turn on the tensor cores: after the other consumer's GEMMs
    ax.set_xlim(0, end + 0.2), ax.set_ylim(-1, 2)
    ax.set_yticks([1.5, 0.5, -0.6], ["consumer 0", "consumer 1", "tensor pipe"], fontsize=7)
    ax.set_xticks([])
    ax.set_xlabel("time (schematic)", fontsize=8)
    fig.legend([Rectangle((0, 0), 1, 1, facecolor=c) for c in gemm_colors + [COLORS["diagonal"]]],
               ["consumer 0's GEMMs (wgmma)", "consumer 1's GEMMs (wgmma)",
                "softmax of S_j (after its own pair, under the other's)"],
               loc="lower center", ncol=3, fontsize=7, frameon=False, bbox_to_anchor=(0.55, 0.0))
    ax.set_title("Step 19's ping-pong: a named barrier passes the turn, so one consumer's softmax runs under the "
                 "other's GEMMs\n(schematic, ideal durations: the measured tensor pipe is not busy all the time, "
                 "doc 19's profile evidence)", fontsize=8)
    return fig


# ---- step 21: the backward's roles over three query tiles, from its Config and barrier constants --------------------
def backward_roles():
    src = read("steps/21_hopper_backward_ws/kernel.cu")

    def const(name):
        return int(re.search(rf"\b{name} = (\d+)", src).group(1))
    stages, prod_regs, cons_regs = const("STAGES"), const("PRODUCER_REGS"), const("CONSUMER_REGS")
    bar_ds, bar_full, bar_empty = const("kBarDs"), const("kBarDqFull"), const("kBarDqEmpty")
    fig = new_figure(8.8, 3.6)
    ax = fig.add_axes([0.15, 0.2, 0.83, 0.64])
    # Schematic durations at d = 128, in units of one [64, 64, 128] wgmma per consumer: Sᵀ and dPᵀ 2, dV and
    # dK 2, dQ 1; the exponentials and dSᵀ 1.2 (Pᵀ's start under dPᵀ); the staging write 0.3; a bulk reduction
    # 0.8 on the copy engine. Both consumers in step (the dSᵀ barrier joins them once per tile).
    rows = {"producer (warp 0)": 3, "consumer 0 (wg 1)": 2, "consumer 1 (wg 2)": 1, "dQ writer (warp 1)": 0}
    col = {"sdp": COLORS["full"], "soft": COLORS["diagonal"], "kv": "#2f5f9e", "dq": COLORS["accent"],
           "io": "#8fbf8f"}

    def box(t, row, w, color, text, fs=6.2):
        ax.add_patch(Rectangle((t, row + 0.15), w, 0.7, facecolor=color, edgecolor="white"))
        ax.text(t + w / 2, row + 0.5, text, ha="center", va="center", fontsize=fs, color="black")
    t, tiles, starts = 0.5 * stages + 0.2, 3, []
    for s in range(stages):  # the first fills go without waiting: a fresh empty barrier's previous phase is complete
        box(0.5 * s, 3, 0.45, col["io"], f"{s}", 5.5)
    for it in range(tiles):
        starts.append(t)
        for cg in (2, 1):
            box(t, cg, 2.0, col["sdp"], f"Sᵀ, dPᵀ {it}")
            box(t + 2.0, cg, 1.2, col["soft"], "Pᵀ, dSᵀ")
            box(t + 3.2, cg, 2.0, col["kv"], "dV, dK")
            box(t + 5.2, cg, 1.0, col["dq"], f"dQ {it}")
            box(t + 6.2, cg, 0.3, col["io"], "", 5)
        ax.plot([t + 5.2, t + 5.2], [0.9, 3.0], color=COLORS["grey"], lw=0.8, ls=":")
        ax.text(t + 5.2, 3.0, f"bar {bar_ds}", fontsize=5.5, ha="center", va="bottom", color=COLORS["grey"])
        box(t + 6.2, 3, 0.3, col["io"], f"{it + stages}", 5.5)  # the slot comes back after dQ's wait: tile it + STAGES
        box(t + 6.5, 0, 0.8, col["dq"], f"bulk +dQ {it}", 5.5)
        ax.text(t + 6.5, -0.05, f"bar {bar_full}, {bar_full + 1} → bar {bar_empty}, {bar_empty + 1}", fontsize=5,
                va="top", color=COLORS["grey"])
        t += 6.5
    ax.set_xlim(0, t + 1.5), ax.set_ylim(-0.4, 4)
    ax.set_yticks([r + 0.5 for r in rows.values()], list(rows), fontsize=7)
    ax.set_xticks([])
    ax.set_xlabel("time (schematic, d = 128)", fontsize=8)
    fig.legend([Rectangle((0, 0), 1, 1, facecolor=c) for c in col.values()],
               ["Sᵀ = K·Qᵀ, dPᵀ = V·dOᵀ", "exponentials, dSᵀ", "dV += Pᵀ·dO, dK += dSᵀ·Q", "dQ (wgmma; bulk add)",
                "Q, dO of tile n (TMA); staging write"], loc="lower center", ncol=5, fontsize=6.5, frameon=False)
    ax.set_title(f"Step 21's roles: warpgroup 0 keeps {prod_regs} registers (producer, dQ writer), the consumers "
                 f"{cons_regs}; a ring of {stages} Q/dO slots\n(schematic: the consumers meet at the dSᵀ barrier, "
                 "the writer adds each tile's dQ while they start the next)", fontsize=8)
    return fig


# ---- step 25: one query tile's groups in lockstep (step 24) and in ping-pong, at d = 64, from the napkin math ------
def backward_pingpong():
    src = read("steps/25_hopper_backward_pingpong/kernel.cu")
    block_m = int(re.search(r"BLOCK_M = WIDE \? (\d+)", src).group(1))  # d = 64's query tile
    # Doc 25's arithmetic, per consumer (64 keys × block_m queries, d = 64): the five products at one SM's share of
    # the dense peak (1071 TFLOP/s over 132 SMs), group A two of them, group B three; E's exponentials at 16 per
    # clock and ten other operations per element at 128 lanes per clock, at 1.98 GHz. Two E's at once share the
    # special-function units and the lanes, each at half speed; two groups at once share the tensor cores.
    per_sm = 1071e12 / 132
    prod = 2 * 64 * block_m * 64 / per_sm * 1e6  # one product, µs
    dur = {"A": 2 * prod, "B": 3 * prod, "E": (64 * block_m / 16 + 64 * block_m * 10 / 128) / 1.98e3}
    tiles, dt = 3, 0.001

    def simulate(pingpong):
        # Each consumer runs A, E, B per tile and waits for each. A group of products is issued to the tensor
        # cores, which run issued groups one after another (in issue order); two E's at once run at half speed.
        # Lockstep: B only once both consumers' E are done (step 24's meeting). Ping-pong: groups are issued in
        # the token's order (c0 A, c1 A, c0 B, c1 B, ...), each as soon as its turn has come.
        seq = [(k, tl) for tl in range(tiles) for k in "AEB"]
        order = [(c, k, tl) for tl in range(tiles) for k in "AB" for c in (0, 1)]
        pos, state, left, start, out = [0, 0], ["idle", "idle"], [0.0, 0.0], [0.0, 0.0], []
        queue, turn, t = [], 0, 0.0
        while min(pos) < len(seq):
            for c in (0, 1):  # issue what can be issued, or start an E
                if pos[c] >= len(seq) or state[c] != "idle":
                    continue
                k, tl = seq[pos[c]]
                if k == "E":
                    state[c], left[c], start[c] = "E", dur["E"], t
                elif pingpong and order[turn] != (c, k, tl):
                    continue
                elif not pingpong and k == "B" and (pos[1 - c] < pos[c] or state[1 - c] == "E"):
                    continue
                else:
                    queue.append([c, k, tl, dur[k], None])
                    state[c] = "waits"
                    turn += pingpong
            if queue:  # the tensor cores: the oldest issued group
                g = queue[0]
                g[4] = t if g[4] is None else g[4]
                g[3] -= dt
                if g[3] <= 0:
                    out.append((g[0], g[1], g[2], g[4], t + dt))
                    queue.pop(0)
                    pos[g[0]], state[g[0]] = pos[g[0]] + 1, "idle"
            busy = [c for c in (0, 1) if state[c] == "E"]
            for c in busy:
                left[c] -= dt / len(busy)
                if left[c] <= 0:
                    out.append((c, "E", seq[pos[c]][1], start[c], t + dt))
                    pos[c], state[c] = pos[c] + 1, "idle"
            t += dt
        return out, t

    fig = new_figure(8.8, 4.6)
    col = {"A": COLORS["full"], "B": "#2f5f9e", "E": COLORS["diagonal"]}
    runs = [simulate(False), simulate(True)]
    end = max(r[1] for r in runs)
    for i, (title, (events, total)) in enumerate(zip(["step 24: the consumers in lockstep",
                                                       "step 25: ping-pong (the token)"], runs)):
        ax = fig.add_axes([0.14, 0.53 - 0.38 * i, 0.84, 0.27])
        for c, k, tl, a, b in events:
            ax.add_patch(Rectangle((a, 1 - c + 0.15), b - a, 0.7, facecolor=col[k], edgecolor="white"))
            ax.text((a + b) / 2, 1 - c + 0.5, f"{k}{tl}", ha="center", va="center", fontsize=6)
        ax.set_xlim(0, end * 1.02), ax.set_ylim(0, 2)
        ax.set_yticks([1.5, 0.5], ["consumer 0", "consumer 1"], fontsize=7)
        ax.set_title(f"{title}: {tiles} tiles in {total:.2f} µs (ideal)", fontsize=8)
        ax.tick_params(axis="x", labelsize=7)
    ax.set_xlabel("µs (ideal durations from the peak rates, d = 64, one SM)", fontsize=8)
    fig.legend([Rectangle((0, 0), 1, 1, facecolor=c) for c in col.values()],
               ["A: Sᵀ, dPᵀ (tensor cores)", "B: dV, dK, lagged dQ (tensor cores)", "E: exponentials, dSᵀ (CUDA cores)"],
               loc="lower center", ncol=3, fontsize=7, frameon=False)
    fig.suptitle("Per query tile, ideal: in lockstep the tensor cores wait while both consumers compute E; with the "
                 "turns, one consumer's E runs under the other's products\n(doc 25's napkin math; the measured "
                 "tiles are longer, doc 24's per-unit table)", fontsize=8)
    return fig


# ---- steps 07, 08 and 12: which tiles each backward kernel walks (steps 13-16 have no dQ kernel) -----------------
def backward_tiles():
    n = 8
    fig = new_figure(8.4, 3.9)
    for p, (title, by_key) in enumerate([("dK, dV kernel: a block per key block\nwalks the query tiles that see it", True),
                                         ("dQ kernel: a block per query tile\nwalks the key blocks it sees", False)]):
        ax = fig.add_axes([0.06 + 0.5 * p, 0.12, 0.4, 0.7])
        for i in range(n):
            for j in range(n):
                kind = "full" if j < i else "diagonal" if j == i else "skipped"
                ax.add_patch(Rectangle((j, n - 1 - i), 1, 1, facecolor=COLORS[kind], edgecolor="white", lw=1))
        pick = 2 if by_key else 5
        if by_key:  # key block 2: query tiles 2 .. n - 1, from the diagonal down
            ax.annotate("", xy=(pick + 0.5, 0.2), xytext=(pick + 0.5, n - 1 - pick + 0.8),
                        arrowprops=dict(arrowstyle="->", lw=2, color=COLORS["accent"]))
        else:  # query tile 5: key blocks 0 .. 5, up to the diagonal
            ax.annotate("", xy=(pick + 0.8, n - 1 - pick + 0.5), xytext=(0.2, n - 1 - pick + 0.5),
                        arrowprops=dict(arrowstyle="->", lw=2, color=COLORS["accent"]))
        ax.set_xlim(0, n), ax.set_ylim(0, n)
        ax.set_xticks([j + 0.5 for j in range(n)], [str(j) for j in range(n)], fontsize=7)
        ax.set_yticks([n - 1 - i + 0.5 for i in range(n)], [str(i) for i in range(n)], fontsize=7)
        ax.set_xlabel("key block"), ax.set_ylabel("query tile")
        ax.set_title(title, fontsize=8)
        ax.set_aspect("equal")
    fig.suptitle("The causal backward as two kernels (steps 07, 08, and 12's default; 12's atomic variant and steps "
                 "13-16 add dQ\nin their dK/dV kernel, so only the left walk): blue tiles unmasked, orange masked, "
                 "grey never visited", fontsize=8.5, y=0.995)
    return fig


# ---- step 05: a query block sweeping the K/V tiles, and where things live in 04 and 05 ---------------------------
def flash_sweep():
    fig, ax = diagram(8.4, 3.2, 40, top=0.88)
    ax.add_patch(Rectangle((2, 14), 10, 12, facecolor=COLORS["diagonal"]))
    ax.text(7, 20, "Q block\n(shared\nmemory)", ha="center", va="center", fontsize=7)
    for t in range(5):
        x = 20 + 14 * t
        face = COLORS["full"] if t == 2 else "#dbe9f6"
        ax.add_patch(Rectangle((x, 28), 11, 8, facecolor=face, edgecolor=COLORS["full"]))
        ax.text(x + 5.5, 32, f"K, V tile {t}", ha="center", va="center", fontsize=7, color="white" if t == 2 else "black")
    ax.annotate("", xy=(90, 25), xytext=(20, 25), arrowprops=dict(arrowstyle="->", lw=1.2, color=COLORS["grey"]))
    ax.text(20, 23, "one tile after the other,\nthrough shared memory", ha="left", va="top", fontsize=7,
            color=COLORS["grey"])
    ax.add_patch(Rectangle((44, 4), 26, 12, facecolor="#d8f0d2", edgecolor=COLORS["grey"]))
    ax.text(57, 10, "S = Q·Kᵀ of tile 2 → m, l, P\nO = α·O + P·V\n(registers: the block's m, l, O)", ha="center",
            va="center", fontsize=7)
    ax.annotate("", xy=(53.5, 16), xytext=(53.5, 28), arrowprops=dict(arrowstyle="->", lw=1))  # clear of the caption
    ax.text(2, 38, "Step 05: one block of BLOCK_M query rows; only its m, l and O survive from tile to tile, never S or P",
            fontsize=7.5)
    return fig


def memory_hierarchy():
    fig = new_figure(8.4, 3.6)
    levels = [("device memory (HBM)", 0), ("L2", 1), ("shared memory", 2), ("registers", 3)]
    where = {"04": {0: "Q, K, V, O\nS and P: B·H·N² floats\n(written, read back)", 1: "passing through",
                    2: "matmul and softmax tiles", 3: "fragments of a tile"},
             "05": {0: "Q, K, V read; O, LSE written\n(no S, no P)", 1: "K, V shared by the blocks\nof a head",
                    2: "the Q block, a K and a V tile,\nthe P tile (fp32 steps)", 3: "S of a tile, m, l, O"}}
    for p, step in enumerate(["04", "05"]):
        ax = fig.add_axes([0.03 + 0.49 * p, 0.05, 0.45, 0.8])
        ax.axis("off"), ax.set_xlim(0, 10), ax.set_ylim(0, 4.3)
        for name, level in levels:
            y = 3 - level
            ax.add_patch(Rectangle((0, y + 0.1), 3.2, 0.8, facecolor="#eeeeee", edgecolor=COLORS["grey"]))
            ax.text(1.6, y + 0.5, name, ha="center", va="center", fontsize=7)
            ax.add_patch(Rectangle((3.4, y + 0.1), 6.4, 0.8, facecolor=COLORS["full"] if level == 0 and step == "04"
                                   else "#dbe9f6", edgecolor=COLORS["full"]))
            ax.text(6.6, y + 0.5, where[step][level], ha="center", va="center", fontsize=6.5,
                    color="white" if level == 0 and step == "04" else "black")
        ax.set_title({"04": "step 04: S and P in device memory", "05": "step 05: S and P never leave the SM"}[step],
                     fontsize=8.5)
    return fig


# ---- step 05: which thread owns which scores (the fp32 steps' lane layout) ------------------------------------------
def lane_map():
    m = re.search(r"instance 64\):\s+BLOCK_M (\d+), BLOCK_N (\d+), (\d+) threads = (\d+) row groups × (\d+)",
                  read("steps/05_flash_forward/kernel.cu"))
    bm, bn, threads, row_groups, col_groups = (int(x) for x in m.groups())
    rows_per, half, warp_size = bm // row_groups, col_groups // 2, 32
    keys = bn // col_groups

    def layout(t):  # step 05's lane_layout: (row group, column group) of thread t
        warp, lane = t // warp_size, t % warp_size
        cg = (lane & 1) | ((lane >> 2) % half) << 1
        rg = warp * (warp_size // col_groups) + (((lane >> 1) & 1) | ((lane >> 2) // half) << 1)
        return rg, cg

    fig = new_figure(8.4, 5.6)
    ax = fig.add_axes([0.07, 0.08, 0.66, 0.84])
    warp_colors = ["#dbe9f6", "#fde2c3", "#d8f0d2", "#f6d5da"]
    for t in range(threads):
        rg, cg = layout(t)
        for e in range(0, keys, 4):  # step 05's chunk(): float4 chunks 4·COL_GROUPS keys apart
            k0 = (e // 4) * 4 * col_groups + 4 * cg
            ax.add_patch(Rectangle((k0, bm - rows_per * (rg + 1)), 4, rows_per, facecolor=warp_colors[t // warp_size],
                                   edgecolor="white", lw=0.6))
            if t < warp_size:
                ax.text(k0 + 2, bm - rows_per * rg - rows_per / 2, str(t), ha="center", va="center", fontsize=7)
    ax.set_xlim(0, bn), ax.set_ylim(0, bm)
    ax.set_xticks(range(0, bn + 1, 8)), ax.set_yticks(range(0, bm + 1, 16), [str(bm - y) for y in range(0, bm + 1, 16)])
    ax.tick_params(labelsize=7)
    ax.set_xlabel("key (column of S)"), ax.set_ylabel("query row of the block")
    ax.set_title(f"Step 05, head_dim ≤ 64: which thread owns which scores of the [{bm}, {bn}] S tile "
                 "(lane numbers for warp 0)", fontsize=8.5)
    lx = fig.add_axes([0.75, 0.3, 0.24, 0.5])
    lx.axis("off")
    for w in range(threads // warp_size):
        lx.add_patch(Rectangle((0, 3 - w), 0.2, 0.6, facecolor=warp_colors[w]))
        lx.text(0.27, 3.3 - w, f"warp {w}", va="center", fontsize=7.5)
    lx.text(0, -0.5, f"A thread owns {rows_per} rows × {keys} keys,\nin float4 chunks {4 * col_groups} keys apart,\n"
            "so a row's threads read one\ncontiguous run of shared memory;\nlanes n and n^1 share rows,\nn and n^2 share keys",
            fontsize=7, va="top")
    lx.set_xlim(0, 1.4), lx.set_ylim(-3.5, 4)
    return fig


def lane_map_backward():
    src = read("steps/07_flash_backward/kernel.cu")
    threads = int(re.search(r"THREADS = D == 64 \? (\d+)", src).group(1))
    s_rows = int(re.search(r"S_ROWS = D == 64 \? (\d+)", src).group(1))
    s_cols = int(re.search(r"S_COLS = (\d+);", src).group(1))
    bm = int(re.search(r"BLOCK_M = (\d+);", src).group(1))
    bn = int(re.search(r"BLOCK_N = (\d+);", src).group(1))
    rgs, cgs, warp_size = bm // s_rows, bn // s_cols, 32
    wpc = rgs // 8

    def layout(t):  # step 07's lane_layout: (row group, column group) of thread t
        warp, lane = t // warp_size, t % warp_size
        rg = (warp % wpc) * 8 + ((lane >> 1) & 7)
        cg = (warp // wpc) * 4 + ((lane & 1) | ((lane >> 4) << 1))
        return rg, cg

    owner = {}
    for t in range(threads):
        rg, cg = layout(t)
        for r in range(s_rows):
            for c in range(s_cols):
                owner[(rg + rgs * r, cg + cgs * c)] = t
    warp_colors = ["#dbe9f6", "#fde2c3", "#d8f0d2", "#f6d5da"]
    fig = new_figure(9.0, 4.8)
    ax = fig.add_axes([0.05, 0.17, 0.42, 0.72])
    for (r, c), t in owner.items():
        ax.add_patch(Rectangle((c, bm - 1 - r), 1, 1, facecolor=warp_colors[t // warp_size], lw=0))
    ax.set_xlim(0, bn), ax.set_ylim(0, bm), ax.set_aspect("equal")
    ax.set_xticks(range(0, bn + 1, 16)), ax.set_yticks(range(0, bm + 1, 16), [str(bm - y) for y in range(0, bm + 1, 16)])
    ax.tick_params(labelsize=7)
    ax.set_xlabel("key"), ax.set_ylabel("query")
    ax.set_title(f"the [{bm}, {bn}] S tile by warp", fontsize=8)
    zr, zc = 16, 20
    ax.add_patch(Rectangle((0, bm - zr), zc, zr, facecolor="none", edgecolor="black", lw=1, ls="--"))
    ax.text(zc + 0.5, bm - zr / 2, "zoomed\nat right", va="center", fontsize=7)
    az = fig.add_axes([0.53, 0.17, 0.45, 0.72])
    for r in range(zr):
        for c in range(zc):
            t = owner[(r, c)]
            az.add_patch(Rectangle((c, zr - 1 - r), 1, 1, facecolor=warp_colors[t // warp_size], edgecolor="white", lw=0.5))
            az.text(c + 0.5, zr - 1 - r + 0.5, f"{t % warp_size}", ha="center", va="center", fontsize=6.5)
    az.set_xlim(0, zc), az.set_ylim(0, zr), az.set_aspect("equal")
    az.set_xticks([c + 0.5 for c in range(0, zc, 4)], [str(c) for c in range(0, zc, 4)], fontsize=6)
    az.set_yticks([zr - 1 - r + 0.5 for r in range(0, zr, 4)], [str(r) for r in range(0, zr, 4)], fontsize=6)
    az.set_xlabel("key"), az.set_ylabel("query")
    az.set_title(f"rows 0-{zr - 1}, keys 0-{zc - 1}: the lane (colour: its warp)", fontsize=8)
    fig.legend([Rectangle((0, 0), 1, 1, facecolor=warp_colors[w]) for w in range(threads // warp_size)],
               [f"warp {w} (threads {w * warp_size}-{(w + 1) * warp_size - 1})" for w in range(threads // warp_size)],
               loc="lower center", ncol=threads // warp_size, fontsize=7, frameon=False, bbox_to_anchor=(0.5, 0.0))
    fig.suptitle(f"Step 07, head_dim 64: a thread owns rows rg + {rgs}·r and keys cg + {cgs}·c ({s_rows} × {s_cols}); "
                 "lanes n and n^1 share rows, n and n^2 share keys", fontsize=8.5, y=0.99)
    return fig


# ---- steps 01 and 02: passes over a row, and the merge tree ------------------------------------------------------
def softmax_passes():
    fig, ax = diagram(8.4, 2.9, 30, top=0.86)
    for row, (name, passes) in enumerate([("01, safe softmax", ["read x → m", "read x → l", "read x, write y"]),
                                          ("02, online softmax", ["read x → (m, l)", "read x, write y"])]):
        y = 19 - 13 * row
        ax.text(0, y + 4, name, fontsize=8, va="center")
        for i, text in enumerate(passes):
            x = 20 + 22 * i
            ax.add_patch(Rectangle((x, y + 1), 20, 6, facecolor=COLORS["full"] if "write" not in text else COLORS["diagonal"],
                                   edgecolor="white"))
            ax.text(x + 10, y + 4, f"pass {i + 1}: {text}", ha="center", va="center", fontsize=6.5)
        reads = sum(t.count("read") for t in passes)
        ax.text(99, y + 4, f"{reads} reads + 1 write\nof the row", ha="right", va="center", fontsize=7)
    ax.text(0, 29, "Device-memory traffic per row: what fusing the max and the sum saves (when the row is not in cache)",
            fontsize=8)
    return fig


def merge_tree():
    fig, ax = diagram(8.4, 3.4, 40)
    levels = [("threads: the recurrence over their own elements", 8, 33), ("warps: butterfly of shuffles", 4, 23),
              ("block: warps through shared memory", 2, 13), ("row: chunks through device memory (long rows)", 1, 3)]
    prev = None
    for name, n, y in levels:
        xs = [100 * (i + 0.5) / n * 0.58 + 2 for i in range(n)]
        for x in xs:
            ax.add_patch(Rectangle((x - 3.5, y), 7, 4.5, facecolor=COLORS["full"] if n > 1 else COLORS["diagonal"],
                                   edgecolor="white"))
            ax.text(x, y + 2.25, "(m, l)", ha="center", va="center", fontsize=6.5, color="white" if n > 1 else "black")
        if prev:
            for i, x in enumerate(xs):
                for px in prev[2 * i: 2 * i + 2]:
                    ax.plot([px, x], [y + 10, y + 4.5], color=COLORS["grey"], lw=0.8)
        ax.text(63, y + 2.25, name, va="center", fontsize=6.5)
        prev = xs
    ax.text(2, 39, "merge((m_a, l_a), (m_b, l_b)) = (m, l_a·e^(m_a − m) + l_b·e^(m_b − m)), m = max(m_a, m_b): "
            "associative, so any tree gives the row's (m, l)", fontsize=7.5)
    return fig


# ---- step 03: the tiles of the matmul ---------------------------------------------------------------------------
def matmul_tiles():
    src = read("steps/03_tiled_matmul/kernel.cu")
    bm, bn, threads = (int(x) for x in re.search(r"using BigTile = Tile<(\d+), (\d+), (\d+), \d+>;", src).groups())
    bk = int(re.search(r"static constexpr int BK = (\d+);", src).group(1))
    tm = int(re.search(r"static constexpr int TM = (\d+);", src).group(1))
    tn = int(re.search(r"static constexpr int TN = (\d+);", src).group(1))
    warp_rows, warp_cols = (int(x) for x in re.search(r"kWarpRows = (\d+), kWarpCols = (\d+);", src).groups())
    sub_m, sub_n = tm // 2, tn // 2  # a thread's 8×8 is 2×2 sub-tiles of 4×4, BM/2 rows and BN/2 columns apart
    # One thread, placed as the kernel places it: warp 0, lane 14 -> (ty, tx) of the thread grid.
    warp, lane = 0, 14
    warps_across = (bn // tn) // warp_cols
    ty = (warp // warps_across) * warp_rows + lane // warp_cols
    tx = (warp % warps_across) * warp_cols + lane % warp_cols
    rows = [h * (bm // 2) + ty * sub_m for h in range(2)]  # first row of each of its two row groups
    cols = [h * (bn // 2) + tx * sub_n for h in range(2)]
    fig = new_figure(8.4, 4.2)
    ax = fig.add_axes([0.02, 0.02, 0.96, 0.88])
    ax.axis("off"), ax.set_aspect("equal")
    u = 0.22  # drawing units per element
    # C tile in the middle, A slab at its left, B slab above it. Row r of C is drawn at y = cy + (bm - r)·u.
    cx, cy = 30, 2
    ax.add_patch(Rectangle((cx, cy), bn * u, bm * u, facecolor="#dbe9f6", edgecolor=COLORS["full"]))
    for i in range(1, bm // sub_m):  # the grid of 4×4 sub-tiles
        ax.plot([cx, cx + bn * u], [cy + i * sub_m * u] * 2, color="white", lw=0.4)
    for j in range(1, bn // sub_n):
        ax.plot([cx + j * sub_n * u] * 2, [cy, cy + bm * u], color="white", lw=0.4)
    ax.plot([cx, cx + bn * u], [cy + bm / 2 * u] * 2, color=COLORS["full"], lw=1, ls="--")
    ax.plot([cx + bn / 2 * u] * 2, [cy, cy + bm * u], color=COLORS["full"], lw=1, ls="--")
    for r0 in rows:
        for c0 in cols:
            ax.add_patch(Rectangle((cx + c0 * u, cy + (bm - r0 - sub_m) * u), sub_n * u, sub_m * u,
                                   facecolor=COLORS["accent"], edgecolor="none"))
    ax_x = cx - 4 - bk * u  # A slab: bm rows × bk, rows aligned with C's
    ax.add_patch(Rectangle((ax_x, cy), bk * u, bm * u, facecolor=COLORS["diagonal"], edgecolor="white"))
    by = cy + bm * u + 4  # B slab: bk × bn, columns aligned with C's
    ax.add_patch(Rectangle((cx, by), bn * u, bk * u, facecolor=COLORS["diagonal"], edgecolor="white"))
    for r0 in rows:
        ax.add_patch(Rectangle((ax_x, cy + (bm - r0 - sub_m) * u), bk * u, sub_m * u, facecolor=COLORS["accent"]))
    for c0 in cols:
        ax.add_patch(Rectangle((cx + c0 * u, by), sub_n * u, bk * u, facecolor=COLORS["accent"]))
    ax.text(ax_x - 1, cy + bm * u / 2, f"A slab\n{bm} × {bk}", ha="right", va="center", fontsize=7.5)
    ax.text(cx + bn * u + 1, by + bk * u / 2, f"B slab {bk} × {bn}", va="center", fontsize=7.5)
    ax.text(cx + bn * u + 3, cy + bm * u - 1,
            f"C tile {bm} × {bn}: {threads} threads as a\n{bm // tm} × {bn // tn} grid, each owning {tm} × {tn} results:\n"
            f"2 × 2 sub-tiles of {sub_m} × {sub_n} (white grid),\n{bm // 2} rows (BM/2) and {bn // 2} columns (BN/2) "
            f"apart\n(dashed: the tile's halves)\n\nred: warp {warp}'s lane {lane}, thread (ty {ty}, tx {tx}):\n"
            f"rows {rows[0]}-{rows[0] + sub_m - 1} and {rows[1]}-{rows[1] + sub_m - 1}, "
            f"columns {cols[0]}-{cols[0] + sub_n - 1} and {cols[1]}-{cols[1] + sub_n - 1};\n"
            f"per k it reads one float4 at each red\nstretch of A and B (4 loads, 64 FMAs)",
            va="top", fontsize=7.5)
    ax.set_xlim(0, 100), ax.set_ylim(0, by + bk * u + 4)
    ax.set_title(f"Step 03's tiles: per slab of K, a block loads {bm}·{bk} + {bk}·{bn} floats and does {bm}·{bn}·{bk} "
                 f"FMAs; a thread does {tm}·{tn} FMAs per {tm}+{tn} shared loads", fontsize=8)
    return fig


# ---- step 08: delta computed once -------------------------------------------------------------------------------
def delta_flow():
    fig, ax = diagram(8.4, 2.8, 30)
    boxes = [(2, 12, "dO, O\n(device memory)", "#eeeeee"), (28, 12, "delta kernel:\nΔ_i = Σ_d dO_id·O_id", COLORS["diagonal"]),
             (58, 20, "dK, dV kernel\n(key blocks)", COLORS["full"]), (58, 4, "dQ kernel\n(query blocks)", COLORS["full"])]
    for x, y, text, face in boxes:
        ax.add_patch(Rectangle((x, y), 22, 7, facecolor=face, edgecolor="white"))
        ax.text(x + 11, y + 3.5, text, ha="center", va="center", fontsize=7, color="white" if face == COLORS["full"] else "black")
    ax.annotate("", xy=(28, 15.5), xytext=(24, 15.5), arrowprops=dict(arrowstyle="->"))
    ax.annotate("", xy=(58, 23.5), xytext=(50, 16.5), arrowprops=dict(arrowstyle="->"))
    ax.annotate("", xy=(58, 7.5), xytext=(50, 14.5), arrowprops=dict(arrowstyle="->"))
    ax.text(52, 27.5, "4 bytes per query row,\nread by both", fontsize=6.5)
    ax.text(82, 15, "step 07: each kernel\nreads O and computes Δ\nitself; step 08: once", fontsize=6.5, va="center")
    return fig


# ---- steps 11 and 16: shared-memory bytes per mma, FLOP per byte of a warp tile -----------------------------------
def bytes_per_mma():
    # Step 11's FA2-shaped d 128 instance: its warps and key tile (its candidate line in kernel.cu).
    d = 128
    warps, bn = (int(x) for x in re.search(rf"Config<{d}, (\d+), \d+, (\d+), \d+, \w+>>\}},\s+// FA2's shape",
                                          read("steps/11_tuned_forward/kernel.cu")).groups())
    budget = 128 * 1.6  # bytes of shared memory per SM clock × clocks per mma (doc 11, "Bytes per mma")
    fig = new_figure(7.0, 3.4)
    ax = fig.add_axes([0.1, 0.2, 0.86, 0.66])
    parts = [("K, V ldmatrix", COLORS["full"]), ("Q re-read (ldmatrix)", "#9cc7f0"), ("cp.async writes", COLORS["diagonal"])]
    labels, stacks = [], []
    for mf in (1, 2):
        for q_in_regs in (True, False):
            mma = mf * d * bn / 64  # per warp and key tile
            kv = 512 * 2 * (d / 16) * (bn / 16) / mma  # ldmatrix.x4 of K and V: 512 bytes each
            q = 0 if q_in_regs else 512 * mf * (d / 16) / mma
            cp = 2 * bn * d * 2 / (warps * mma)  # the block's K and V tile written once, over all its warps' mma
            stacks.append((kv, q, cp))
            labels.append(f"MF {mf}\nQ {'in registers' if q_in_regs else 'from smem'}\ntotal {kv + q + cp:.0f}")
    for k, (name, color) in enumerate(parts):
        bottoms = [sum(s[:k]) for s in stacks]
        ax.bar(range(len(stacks)), [s[k] for s in stacks], bottom=bottoms, color=color, label=name,
               edgecolor="white", lw=0.8)
        for i, s in enumerate(stacks):
            if s[k]:
                ax.text(i, bottoms[i] + s[k] / 2, f"{s[k]:.0f}", ha="center", va="center", fontsize=7,
                        color="white" if k == 0 else "black")
    ax.axhline(budget, color="black", ls="--", lw=1, label=f"≈ {budget:.0f} B: 128 B/clock × 1.6 clocks per mma")
    ax.set_xticks(range(len(stacks)), labels, fontsize=7)
    ax.set_ylim(0, max(sum(s) for s in stacks) * 1.15)
    ax.set_ylabel("shared-memory bytes per mma")
    ax.legend(fontsize=7, loc="upper right")
    ax.set_title(f"Step 11 at d {d}, {bn}-key tiles, {warps} warps: shared-memory bytes per mma.m16n8k16\n"
                 "(above the dashed line: bound by shared memory)", fontsize=8)
    return fig


def warp_tile_intensity():
    src = read("steps/13_backward_warp_tiles/kernel.cu")
    per_clock = int(re.search(r"(\d+)/128 ≈ \d+ that keeps the tensor pipe \(mma.sync ceiling", src).group(1))
    line = per_clock / 128
    # The warp tile shapes that occur: the rows of doc 13's table beside this figure.
    doc = read("docs/13_backward_warp_tiles.md")
    tiles = [(int(m), int(n)) for m, n in re.findall(r"^\| \[(\d+), (\d+)\] \|", doc, re.M)]
    fig = new_figure(7.0, 3.0)
    ax = fig.add_axes([0.1, 0.16, 0.86, 0.7])
    vals = [m * n / (m + n) for m, n in tiles]  # 2·m·n·k FLOPs over (m + n)·k·2 bytes of operand rows
    ax.bar(range(len(tiles)), vals, color=[COLORS["accent"] if v < line else COLORS["full"] for v in vals])
    for i, v in enumerate(vals):  # inside the bar's top: clear of the dashed line
        ax.text(i, v - 0.8, f"{v:.1f}", ha="center", va="top", fontsize=7, color="white")
    ax.axhline(line, color="black", ls="--", lw=1)
    ax.text(-0.4, line + 0.8, f"{per_clock}/128 ≈ {line:.0f}: below it the tensor pipe\noutruns shared memory (red)",
            ha="left", va="bottom", fontsize=7)
    ax.set_xlim(-0.5, len(tiles) - 0.5), ax.set_ylim(0, max(vals) * 1.15)
    ax.set_xticks(range(len(tiles)), [f"[{m}, {n}]" for m, n in tiles], fontsize=7)
    ax.set_xlabel("warp tile [m, n] (doc 13's table)", fontsize=8)
    ax.set_ylabel("FLOP per byte read")
    ax.set_title("Step 13: FLOP per shared-memory byte of a warp's [m, n] product tile, m·n / (m + n)", fontsize=8)
    return fig


# ---- the climb ------------------------------------------------------------------------------------------------
CLIMB_SHAPE = "B4 H16 S4096 D128"  # the FA2 shape at seq 4096, head_dim 128, not causal
# The forward ladder (the backward steps run these steps' forwards); 04's rows carry " fwd" (it has a backward).
CLIMB_STEPS = ("04_naive_attention", "05_flash_forward", "06_causal_stages", "09_tensor_core_forward",
               "10_swizzle_pipeline_forward", "11_tuned_forward", "17_hopper_forward", "18_hopper_warp_specialized",
               "19_hopper_pingpong_overlap")


def climb():
    rows = list(csv.DictReader(open(os.path.join(ROOT, "profiles", "h100", "bench.csv"), encoding="utf-8")))
    rate, peaks = {}, {}
    for r in rows:
        st, prob = r["step"], r["problem"].strip()
        for dt in ("f32", "f16"):
            if prob in (f"{CLIMB_SHAPE} {dt}", f"{CLIMB_SHAPE} {dt} fwd") and r["unit"] == "TFLOP/s":
                rate.setdefault((st, dt), float(r["rate"]))
                peaks[r["peak"]] = float(r["peak_value"])
    steps = [st for st in CLIMB_STEPS if (st, "f16") in rate or (st, "f32") in rate]
    fig = new_figure(8.0, 4.0)
    ax = fig.add_axes([0.09, 0.2, 0.88, 0.7])
    # The horizontal references: SDPA's two backends and the card's peaks.
    refs = []
    for (name, key), style in zip([("SDPA-FA2", "sdpa_flash"), ("SDPA-cuDNN", "sdpa_cudnn")], ["--", ":"]):
        if (key, "f16") in rate:
            refs.append((rate[(key, "f16")], f"{name} f16 {rate[(key, 'f16')]:.0f}", dict(color="black", ls=style, lw=1)))
    for name, key in [("fp32 peak", "fp32"), ("fp16 tensor peak", "tensor")]:
        if key in peaks:
            refs.append((peaks[key], f"{name} {peaks[key]:.0f}", dict(color=COLORS["accent"], lw=0.8)))
    for v, text, style in refs:
        ax.axhline(v, **style)
        ax.text(-0.45, v * 1.04, text, ha="left", va="bottom", fontsize=7, color=style["color"])
    # One marker per step (a log axis has no zero for a bar to start from), its value above it, or below it
    # where a reference line would cross the text (7 pt is about a factor 1.2 of this axis).
    xs, labels, vals = [], [], []
    for i, st in enumerate(steps):
        dt = "f16" if (st, "f16") in rate else "f32"
        v = rate[(st, dt)]
        xs.append(i), labels.append(f"{st[:2]} {dt}"), vals.append(v)
        ax.scatter([i], [v], s=40, zorder=3, color=COLORS["full"] if dt == "f16" else COLORS["grey"])
        above = (v * 1.1, v * 1.1 * 1.25)
        if any(above[0] <= r <= above[1] for r, _, _ in refs):
            ax.text(i, v / 1.1, f"{v:.0f}", ha="center", va="top", fontsize=7)
        else:
            ax.text(i, v * 1.1, f"{v:.0f}", ha="center", va="bottom", fontsize=7)
    ax.plot(xs, vals, color=COLORS["grey"], lw=0.6, zorder=2)
    ax.scatter([], [], s=40, color=COLORS["grey"], label="fp32 step (CUDA cores)")
    ax.scatter([], [], s=40, color=COLORS["full"], label="fp16 step (tensor cores)")
    ax.legend(fontsize=7, loc="lower right")
    ax.set_yscale("log"), ax.set_xlim(-0.5, len(steps) - 0.5), ax.set_ylim(min(vals) / 1.6, max(v for v, _, _ in refs) * 1.4)
    ax.set_xticks(xs, labels, rotation=45, ha="right", fontsize=7)
    ax.set_ylabel("TFLOP/s (log)")
    ax.set_title(f"The climb: every forward step at {CLIMB_SHAPE}, not causal (profiles/h100/bench.csv)", fontsize=9)
    return fig


# ---- step 22: decoding against the copy bandwidth --------------------------------------------------------------
# Step 22 is drawn last (zorder 3), a small filled disc inside the baselines' larger open markers: it lands on or
# near SDPA-cuDNN's points at many shapes, and drawn first it disappeared under the baselines' markers.
DECODE_STYLES = {"22_split_kv_decode": ("step 22", dict(marker="o", s=16, color=COLORS["full"], zorder=3)),
                 "sdpa_cudnn": ("SDPA-cuDNN", dict(marker="s", s=46, facecolors="none", edgecolors="black", lw=0.8,
                                                   zorder=2)),
                 "sdpa_flash": ("SDPA-FA2", dict(marker="x", s=30, color=COLORS["grey"], lw=0.8, zorder=2)),
                 "sdpa_efficient": ("SDPA-efficient", dict(marker="^", s=46, facecolors="none",
                                                           edgecolors=COLORS["diagonal"], lw=0.8, zorder=2))}


def decode_bandwidth():
    """Step 22's decode sweep and SDPA's at the same shapes: % of the copy bandwidth measured in the same run
    over the K/V bytes read, with the L2 size and the copy target of doc 22's table (profiles/results.py)."""
    sys.path.insert(0, os.path.join(ROOT, "profiles"))
    import results
    cells = results.decode_cells(os.path.join(ROOT, "profiles", "h100", "bench.csv"))
    fig = new_figure(7.5, 3.6)
    ax = fig.add_axes([0.09, 0.14, 0.88, 0.74])
    xs = []
    for step, (name, style) in DECODE_STYLES.items():
        pts = sorted((c[step][3] / 1e6, c[step][2]) for c in cells.values() if step in c)
        if pts:
            refused = len(cells) - len(pts)
            ax.scatter(*zip(*pts), label=f"{name} ({len(pts)} shapes" +
                       (f"; refused the other {refused})" if refused else ")"), **style)
            xs += [x for x, _ in pts]
    lo, hi = min(xs) / 1.5, max(xs) * 1.5
    l2_mb, target = results.DECODE_L2_BYTES / 1e6, 100 * results.DECODE_TARGET_COPY
    ax.axvline(l2_mb, color="black", lw=0.8, ls=":")
    ax.text(l2_mb * 1.04, 3, f"L2: {l2_mb:.0f} MB", fontsize=7)
    ax.hlines(target, l2_mb, hi, color=COLORS["accent"], lw=0.8, ls="--")  # the target holds above the L2 only
    ax.text(hi / 1.15, target - 2, f"target above the L2:\n{target:.0f}% of copy", fontsize=7,
            color=COLORS["accent"], ha="right", va="top")
    ax.set_xscale("log"), ax.set_xlim(lo, hi), ax.set_ylim(0, 110)
    ax.set_xlabel("K and V bytes read (MB, log)"), ax.set_ylabel("% of the measured copy bandwidth")
    ax.legend(fontsize=7, loc="upper left")
    ax.set_title("Decoding, one query row per head (32 query heads, d 128, fp16): bandwidth against cache size",
                 fontsize=9)
    return fig


FIGURES = {"causal_tiles": causal_tiles, "mma_fragments": mma_fragments, "swizzle_banks": swizzle_banks,
           "split_combine": split_combine, "climb": climb, "ring_timeline": ring_timeline,
           "wgmma_accumulator": wgmma_accumulator, "wgmma_operand": wgmma_operand,
           "mbarrier_phases": mbarrier_phases,
           "pingpong_timeline": pingpong_timeline, "backward_roles": backward_roles, "backward_tiles": backward_tiles,
           "flash_sweep": flash_sweep,
           "memory_hierarchy": memory_hierarchy, "lane_map": lane_map, "lane_map_backward": lane_map_backward, "softmax_passes": softmax_passes,
           "merge_tree": merge_tree, "matmul_tiles": matmul_tiles, "delta_flow": delta_flow,
           "bytes_per_mma": bytes_per_mma, "warp_tile_intensity": warp_tile_intensity,
           "decode_bandwidth": decode_bandwidth, "backward_pingpong": backward_pingpong}


def svg(fig):
    out = io.StringIO()
    fig.savefig(out, format="svg", metadata={"Date": None, "Creator": None})
    plt.close(fig)
    return out.getvalue()


STAMP = os.path.join(OUT, "matplotlib_version.txt")


def labels(text):
    """What a figure says: its <text> elements' contents, in order (matplotlib-version independent)."""
    return re.findall(r"<text\b[^>]*>([^<]*)</text>", text)


def main(argv):
    if plt is None:
        print("SKIPPED: no matplotlib (apt-get install python3-matplotlib)")
        return SKIP
    matplotlib.rcParams.update({"svg.hashsalt": "flashattention-from-scratch", "svg.fonttype": "none",
                                "font.family": "DejaVu Sans"})
    check = "--check" in argv
    drew = open(STAMP).read().strip() if os.path.exists(STAMP) else None
    exact = drew == matplotlib.__version__  # byte for byte only with the matplotlib that drew them
    stale = []
    os.makedirs(OUT, exist_ok=True)
    for name, draw in FIGURES.items():
        path = os.path.join(OUT, name + ".svg")
        text = svg(draw())
        old = open(path, encoding="utf-8").read() if os.path.exists(path) else None
        if old is None or (old != text if exact or not check else labels(old) != labels(text)):
            stale.append(name)
            if not check:
                with open(path, "w", encoding="utf-8") as f:
                    f.write(text)
    if check:
        how = ("" if exact else f" (labels compared, not bytes: drawn with matplotlib {drew}, "
                                f"checked with {matplotlib.__version__})")
        print("figures stale: " + ", ".join(stale) + " (run: python3 tools/figures.py)" + how if stale else
              f"figures up to date ({len(FIGURES)}){how}")
        return 1 if stale else 0
    with open(STAMP, "w", encoding="utf-8") as f:
        f.write(matplotlib.__version__ + "\n")
    print("wrote: " + (", ".join(stale) if stale else "nothing (already up to date)"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
