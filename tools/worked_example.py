#!/usr/bin/env python3
"""tools/worked_example.py: the worked examples of docs 02 and 05, computed (never typed).

    python3 tools/worked_example.py    # print both blocks

The blocks are rendered into the docs by profiles/results.py (markers <!-- worked:online_softmax:begin -->
in docs/02_online_softmax.md and <!-- worked:flash_tile:begin --> in docs/05_flash_forward.md), so its
`check` (a CPU test) fails when a committed block no longer matches what this script computes.

  online_softmax  one row of 8 scores split into two chunks of 4: each chunk's (m, l), the merge, and
                  the direct (m, l) of the whole row beside it; the softmax and the LSE
  flash_tile      one query row (d = 4) against two K/V tiles of 2 keys: m, l and the unnormalised O
                  before and after the second tile's rescale, then O / l beside softmax(s)·V

The inputs are fixed small numbers (a seeded generator, two decimals) so a reader can redo every
step by hand. Only the standard library.
"""
import math
import random


def fmt(x, digits=6):
    """A number as the docs show it: -inf, or `digits` significant digits."""
    if x == -math.inf:
        return "−∞"
    return f"{x:.{digits}g}".replace("-", "−")


def vec(xs, digits=4):
    return "(" + ", ".join(fmt(x, digits) for x in xs) + ")"


def row(seed, n, lo, hi):
    rs = random.Random(seed)
    return [round(rs.uniform(lo, hi), 2) for _ in range(n)]


def total(xs):
    """Left to right, one rounding per add, as a kernel's loop adds. (Python 3.12's sum() of floats
    compensates its rounding, so with it the printed digits would depend on the Python version.)"""
    t = 0.0
    for x in xs:
        t += x
    return t


def summary(xs):
    """(m, l) of a set of scores: the max and the sum of exp(x − m) (step 02)."""
    m = max(xs)
    return m, total(math.exp(x - m) for x in xs)


def online_softmax_block():
    x = row(2026, 8, -3.0, 5.0)
    a, b = x[:4], x[4:]
    (ma, la), (mb, lb) = summary(a), summary(b)
    m = max(ma, mb)
    wa, wb = math.exp(ma - m), math.exp(mb - m)
    l = la * wa + lb * wb
    md, ld = summary(x)
    lse = m + math.log(l)
    y = [math.exp(v - m) / l for v in x]
    lines = [
        f"The row $x = {vec(x, 3)}$, split into $A$ (the first four) and $B$ (the last four):",
        "",
        "| | elements | $m$ | $l = \\sum e^{x - m}$ |",
        "|---|---|---|---|",
        f"| $A$ | {vec(a, 3)} | {fmt(ma)} | {fmt(la)} |",
        f"| $B$ | {vec(b, 3)} | {fmt(mb)} | {fmt(lb)} |",
        f"| merge | $m = \\max(m_A, m_B)$, $l = l_A e^{{m_A - m}} + l_B e^{{m_B - m}}$ | {fmt(m)} | "
        f"{fmt(la)} · {fmt(wa)} + {fmt(lb)} · {fmt(wb)} = {fmt(l)} |",
        f"| whole row, directly | | {fmt(md)} | {fmt(ld)} |",
        "",
        ("The merge and the direct pass agree exactly here" if l == ld else
         f"The merge and the direct pass agree ($l$ differs by {fmt(abs(l - ld), 2)}: rounding)") + ". Then "
        f"$\\mathrm{{LSE}} = m + \\ln l = {fmt(m)} + {fmt(math.log(l))} = {fmt(lse)}$, and the softmax is "
        f"$y_i = e^{{x_i - m}} / l = {vec(y, 3)}$ (sum {fmt(total(y))}). The chunk whose max was not the row's "
        f"is the one rescaled: its weight $e^{{m_A - m}}$ or $e^{{m_B - m}}$ is below 1.",
    ]
    return "\n".join(lines)


def flash_tile_block():
    d, scale = 4, 0.5
    q = row(7, d, -1.0, 2.0)
    ks = [row(10 + j, d, -1.0, 2.0) for j in range(4)]
    vs = [row(20 + j, d, -1.0, 1.0) for j in range(4)]
    dot = lambda k: scale * total(qi * ki for qi, ki in zip(q, k))  # noqa: E731
    top = max(range(4), key=lambda j: dot(ks[j]))  # the largest score goes to tile 2: its max moves
    order = [j for j in range(4) if j != top] + [top]
    ks, vs = [ks[j] for j in order], [vs[j] for j in order]
    s = [dot(k) for k in ks]
    m, l, o = -math.inf, 0.0, [0.0] * d
    steps = []
    for t in range(2):
        tile = range(2 * t, 2 * t + 2)
        m_new = max(m, max(s[j] for j in tile))
        alpha = math.exp(m - m_new) if m != -math.inf else 0.0
        p = [math.exp(s[j] - m_new) for j in tile]
        l_new = alpha * l + total(p)
        o_new = [alpha * o[i] + total(pj * vs[j][i] for pj, j in zip(p, tile)) for i in range(d)]
        steps.append((t + 1, [s[j] for j in tile], m, m_new, alpha, p, l, l_new, o, o_new))
        m, l, o = m_new, l_new, o_new
    out = [oi / l for oi in o]
    ms = max(s)
    w = [math.exp(x - ms) for x in s]
    direct = [total(wj * v[i] for wj, v in zip(w, vs)) / total(w) for i in range(d)]
    lines = [
        f"One query row $q = {vec(q, 3)}$, scale {fmt(scale)}, four keys in two tiles of two:",
        "",
        "| key $j$ | $K_j$ | $V_j$ | $s_j = \\text{scale} \\cdot q \\cdot K_j$ |",
        "|---|---|---|---|",
    ]
    lines += [f"| {j} | {vec(ks[j], 3)} | {vec(vs[j], 3)} | {fmt(s[j])} |" for j in range(4)]
    lines += ["", "| tile | $s$ of the tile | $m$ before → after | $\\alpha = e^{m_{t-1} - m_t}$ | "
              "$p = e^{s - m_t}$ | $l$ before → after | $o$ before → after (unnormalised) |", "|---|---|---|---|---|---|---|"]
    for t, st, m0, m1, a, p, l0, l1, o0, o1 in steps:
        lines.append(f"| {t} | {vec(st)} | {fmt(m0, 4)} → {fmt(m1, 4)} | {fmt(a, 4)} | {vec(p)} | "
                     f"{fmt(l0, 4)} → {fmt(l1, 4)} | {vec(o0)} → {vec(o1)} |")
    lines += [
        "",
        f"Tile 1 starts from $m = −∞$, so $\\alpha = 0$ and nothing is carried. In tile 2 "
        + ("the max moved, so $l$ and $o$ are scaled by $\\alpha < 1$ before the new terms are added"
           if steps[1][4] < 1 else "the max did not move, so $\\alpha = 1$ and nothing is rescaled")
        + f". After the last tile, $O = o / l = {vec(out)}$; softmax$(s) \\cdot V$ computed directly gives "
        f"${vec(direct)}$, and $\\mathrm{{LSE}} = m + \\ln l = {fmt(m + math.log(l))}$.",
    ]
    return "\n".join(lines)


BLOCKS = {"worked:online_softmax": online_softmax_block, "worked:flash_tile": flash_tile_block}

if __name__ == "__main__":
    for name, fn in BLOCKS.items():
        print(f"-- {name}\n{fn()}\n")
