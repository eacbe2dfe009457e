#!/usr/bin/env python3
"""tests/dq_order.py: step 27's deterministic dQ orders, modelled and checked (CPU test).

Step 27 (steps/27_hopper_backward_deterministic/kernel.cu) adds each query tile's dQ partials in a fixed order:
a counter per tile, and every key block waits until the counter equals its turn. A wrong turn is a hang or
a result that varies run to run on the GPU, not a failed comparison, and whether it can hang depends on
which blocks are resident. This model replays the kernel's rules:

  work       block ticket t -> head t // n_k, key block j = t % n_k (causal: kb = n_k - 1 - j, else kb = j)
  walk       causal: tiles kb*r .. n_m - 1 in order (r = BLOCK_N / BLOCK_M: 1 at d = 64, 2 at d = 128);
             not causal: all n_m tiles, from tile kb and wrapping around when rotated, from 0 otherwise
  turn       write_dq's expression (causal: descending from the tile's last visitor; rotated: m, m-1, ..,
             0, n_k-1, .., m+1; otherwise ascending)
  launcher   rotate only when not causal, n_k <= n_m and n_k <= the blocks resident at once

and checks, for every shape up to a size (and some random larger ones):

  - each tile's visitors hold the turns 0 .. V-1, once each (a fixed order: the same bits run after run);
  - no deadlock, over random schedules of ticketed blocks on R resident slots, with the launcher's rule;
  - no queue: with a head's blocks started together and equal work per tile, a rotated or causal block
    never waits for its turn, while the ascending order's block kb ends (kb + 1) additions late;
  - causal heads over several waves of blocks: taken last first, with turns (the kernel's order), they
    end close to unordered additions taken longest first (step 26's default); taken longest first with
    turns, they queue again at d = 64 when a turn takes a sizeable part of a tile to pass on.

It models the order of operations, not the hardware. The mutants at the end (each must fail a check) show
that the checks can fail: a turn off by one, the rotation past the resident blocks, and work taken from
blockIdx (blocks started in any order) instead of tickets.
"""
import random
import sys

BLOCK_M = 64  # the model's tile; BLOCK_N = r * BLOCK_M


def rule_rotate(n_k, n_m, causal, resident):
    """The launcher's choice (launch in kernel.cu)."""
    return not causal and n_k <= n_m and n_k <= resident


def walk(kb, n_m, r, causal, rotate):
    """The query tiles block kb visits, in its order (Walk in kernel.cu)."""
    first = min(kb * r, n_m) if causal else 0
    n = n_m - first
    rot = kb if rotate else 0
    return [first + (it + rot) % n for it in range(n)]


def turn(kb, m, n_k, r, causal, rotate, off=0):
    """write_dq's turn of block kb at tile m (off: a mutant's error)."""
    block_n = r * BLOCK_M
    last = min(n_k - 1, (m * BLOCK_M + BLOCK_M - 1) // block_n) if causal else n_k - 1
    if causal:
        return last - kb
    if not rotate:
        return kb
    return (min(m, last) - kb if kb <= m else m + 1 + last - kb) + off


def check_permutations(n_k, n_m, r, causal, rotate, off=0):
    """Every tile's visitors hold the turns 0 .. V-1, once each."""
    seen = {}
    for kb in range(n_k):
        for m in walk(kb, n_m, r, causal, rotate):
            seen.setdefault(m, []).append(turn(kb, m, n_k, r, causal, rotate, off))
    for m, turns in seen.items():
        if sorted(turns) != list(range(len(turns))):
            return f"tile {m}: turns {sorted(turns)}"
    return ""


def simulate(n_k, n_m, r, causal, rotate, heads, resident, rng, tickets=True, off=0):
    """Random schedule: blocks start on free slots (by ticket, or in a random blockIdx order without
    tickets), each repeatedly adds its next tile when the tile's counter equals its turn, and frees its slot
    when done. Returns '' or what went wrong ('deadlock ...')."""
    jobs = [(h, j) for h in range(heads) for j in range(n_k)]
    if not tickets:
        rng.shuffle(jobs)  # the hardware may start blocks in any order; work from blockIdx follows it
    counters = {}
    running, done, nxt = [], 0, 0
    while done < len(jobs):
        while len(running) < resident and nxt < len(jobs):
            h, j = jobs[nxt]
            nxt += 1
            kb = n_k - 1 - j if causal else j
            running.append([h, kb, walk(kb, n_m, r, causal, rotate), 0])
        ready = [b for b in running if b[3] < len(b[2]) and
                 counters.get((b[0], b[2][b[3]]), 0) == turn(b[1], b[2][b[3]], n_k, r, causal, rotate, off)]
        finished = [b for b in running if b[3] == len(b[2])]
        if not ready and not finished:
            return f"deadlock: {len(running)} blocks resident, each waiting for a turn"
        if finished and (not ready or rng.random() < 0.5):
            running.remove(rng.choice(finished))
            done += 1
            continue
        b = rng.choice(ready)
        key = (b[0], b[2][b[3]])
        counters[key] = counters.get(key, 0) + 1
        b[3] += 1
    return ""


def finish_times(n_k, n_m, r, causal, rotate, t_tile=1.0, a=0.3):
    """One head, every block started at 0, each tile's work t_tile, each addition a (the writer adds its
    tiles in order, after the tile's work and after the turn's previous addition): per block, the time its
    last addition ends minus its own work plus one addition (0: it never waited)."""
    walks = {kb: walk(kb, n_m, r, causal, rotate) for kb in range(n_k)}
    order = {}  # tile -> visitors by turn
    for kb, w in walks.items():
        for m in w:
            order.setdefault(m, {})[turn(kb, m, n_k, r, causal, rotate)] = kb
    end = {}  # (kb, it) -> end of that addition
    pending = {kb: 0 for kb in walks}
    while any(pending[kb] < len(walks[kb]) for kb in walks):
        progressed = False
        for kb, w in walks.items():
            it = pending[kb]
            if it == len(w):
                continue
            m = w[it]
            t = turn(kb, m, n_k, r, causal, rotate)
            prev = order[m].get(t - 1)
            if t > 0 and (prev is None or (prev, walks[prev].index(m)) not in end):
                continue  # the previous turn's addition has not been placed yet
            start = max((it + 1) * t_tile, end.get((kb, it - 1), 0.0),
                        end[(prev, walks[prev].index(m))] if t > 0 else 0.0)
            end[(kb, it)] = start + a
            pending[kb] += 1
            progressed = True
        if not progressed:
            raise RuntimeError("finish_times: no order")
    return {kb: end[(kb, len(w) - 1)] - (len(w) * t_tile + a) for kb, w in walks.items() if w}


def makespan(n_k, n_m, r, heads, resident, order, t_tile=1.0, a=0.3, dt=0.05):
    """Causal heads on `resident` slots, blocks started by ticket as slots free, time-stepped. A block's
    consumers compute a tile in t_tile and then stage its dQ in the one staging buffer, once the writer has
    taken the previous one; the writer takes a staged tile on its turn (descending per tile; none for 'any'),
    frees the staging at once (change 3) and adds it in `a`; the block frees its slot after its last
    addition. order: 'last-first' (kb = n_k - 1 - j, turns: steps 26 and 27), 'longest-first' (kb = j, turns:
    the build the history tells of) or 'any' (kb = j, no turns: step 26's default). Returns the time the last
    block ends (inf: a deadlock)."""
    jobs = [(h, j) for h in range(heads) for j in range(n_k)]
    counters, running, nxt, t, done = {}, [], 0, 0.0, 0
    bound = 4 * heads * n_k * (n_m * t_tile + (n_m + 1) * a)  # far past any schedule that moves: a deadlock
    while done < len(jobs):
        if t > bound:
            return float("inf")
        while len(running) < resident and nxt < len(jobs):
            h, j = jobs[nxt]
            nxt += 1
            kb = n_k - 1 - j if order == "last-first" else j
            w = walk(kb, n_m, r, True, False)
            running.append({"h": h, "kb": kb, "w": w, "computed": 0, "c_until": t + t_tile if w else None,
                            "staged": None, "it": 0, "busy_until": None})
        for b in list(running):
            n = len(b["w"])
            if b["busy_until"] is not None and b["busy_until"] <= t + 1e-9:  # an addition lands
                key = (b["h"], b["w"][b["it"]])
                counters[key] = counters.get(key, 0) + 1
                b["it"], b["busy_until"] = b["it"] + 1, None
            if b["it"] == n:
                running.remove(b)
                done += 1
                continue
            if b["c_until"] is not None and b["c_until"] <= t + 1e-9 and b["staged"] is None:  # stage, go on
                b["staged"], b["computed"] = b["computed"], b["computed"] + 1
                b["c_until"] = t + t_tile if b["computed"] < n else None
            if b["busy_until"] is None and b["staged"] == b["it"]:
                m = b["w"][b["it"]]
                if order == "any" or counters.get((b["h"], m), 0) == turn(b["kb"], m, n_k, r, True, False):
                    b["busy_until"], b["staged"] = t + a, None
        t += dt
    return t


ORDERS = ("any", "last-first", "longest-first")


def shapes(limit):
    for r in (1, 2):
        for n_k in range(1, limit + 1):
            for n_m in range(1, limit * r + 1):
                for causal in (False, True):
                    yield n_k, n_m, r, causal


def main():
    rng = random.Random(27)
    failures = []

    def expect(ok, what):
        if not ok:
            failures.append(what)

    # 1. a fixed order per tile, for every order the launcher can pick
    for n_k, n_m, r, causal in shapes(12):
        for rotate in {rule_rotate(n_k, n_m, causal, 10 ** 9), False}:
            if rotate and not (not causal and n_k <= n_m):
                continue
            err = check_permutations(n_k, n_m, r, causal, rotate)
            expect(not err, f"permutation n_k={n_k} n_m={n_m} r={r} causal={causal} rotate={rotate}: {err}")

    # 2. no deadlock with tickets and the launcher's rule, over random schedules and resident slot counts
    cases = 0
    for n_k, n_m, r, causal in shapes(7):
        for resident in (1, 2, n_k - 1, n_k, n_k + 3):
            if resident < 1:
                continue
            rotate = rule_rotate(n_k, n_m, causal, resident)
            for _ in range(3):
                err = simulate(n_k, n_m, r, causal, rotate, heads=3, resident=resident, rng=rng)
                expect(not err, f"schedule n_k={n_k} n_m={n_m} r={r} causal={causal} R={resident}: {err}")
                cases += 1
    for _ in range(60):  # larger, random
        n_k, r, causal = rng.randint(1, 40), rng.choice((1, 2)), rng.random() < 0.5
        n_m, resident = rng.randint(1, 40 * r), rng.randint(1, 50)
        rotate = rule_rotate(n_k, n_m, causal, resident)
        err = simulate(n_k, n_m, r, causal, rotate, heads=2, resident=resident, rng=rng)
        expect(not err, f"schedule n_k={n_k} n_m={n_m} r={r} causal={causal} R={resident}: {err}")
        cases += 1

    # 3. no queue: rotated and causal blocks never wait; the ascending order's block kb ends (kb + 1)·a late
    for n_k, n_m, r, causal in shapes(10):
        rotate = rule_rotate(n_k, n_m, causal, 10 ** 9)
        if not (causal or rotate):
            continue
        late = finish_times(n_k, n_m, r, causal, rotate)
        expect(max(late.values(), default=0) < 1e-9, f"queue n_k={n_k} n_m={n_m} r={r} causal={causal}: {late}")
    late = finish_times(8, 8, 1, False, False)
    expect(all(abs(late[kb] - kb * 0.3) < 1e-9 for kb in late), f"ascending: block kb late by kb·a, got {late}")

    # 4. causal heads over several waves (a head's blocks fit on the slots, more heads than fit), with a turn
    #    that takes about half a tile's time to pass on (an assumption, not a measurement): the kernel's order
    #    (last first, with turns) ends close to unordered additions. Taken longest first, at d = 64 (the next
    #    block one tile ahead) the blocks started later fall in step with the long walks, each waits on the
    #    next, and the queue returns; at d = 128 (two tiles ahead) it does not. The history's measurement.
    spans = {o: makespan(32, 32, 1, heads=12, resident=33, order=o, a=0.6, dt=0.1) for o in ORDERS}
    wide = {o: makespan(32, 64, 2, heads=12, resident=33, order=o, a=0.6, dt=0.1) for o in ORDERS}
    expect(spans["last-first"] < 1.15 * spans["any"], f"causal over waves, d = 64: {spans}")
    expect(spans["longest-first"] > 1.2 * spans["last-first"], f"longest first, d = 64: {spans}")
    expect(wide["longest-first"] < 1.1 * wide["last-first"], f"longest first, d = 128: {wide}")

    # The mutants: each must fail one of the checks above.
    mutants = {
        "a turn off by one (rotated)": check_permutations(6, 6, 1, False, True, off=1) != "",
        "rotated with more key blocks than resident slots": any(
            simulate(6, 6, 1, False, True, heads=2, resident=4, rng=rng) for _ in range(3)),
        "work from blockIdx, blocks started in any order (ascending)": any(
            simulate(6, 6, 1, False, False, heads=2, resident=2, rng=rng, tickets=False) for _ in range(20)),
        "work from blockIdx, blocks started in any order (causal)": any(
            simulate(6, 6, 1, True, False, heads=2, resident=2, rng=rng, tickets=False) for _ in range(20)),
        "rotated with more key blocks than query tiles (a queue returns)": check_permutations(5, 3, 1, False, True) != ""
        or max(finish_times(5, 3, 1, False, True).values()) > 1e-9,
    }
    for name, caught in mutants.items():
        expect(caught, f"mutant not caught: {name}")

    if failures:
        print("\n".join(failures[:20]))
        print(f"dq_order: {len(failures)} failure(s)")
        return 1
    print(f"dq_order: fixed orders, {cases} random schedules without deadlock, no queue where the launcher "
          f"rotates or the mask staggers; causal over waves (d = 64), makespan: no order {spans['any']:.1f}, "
          f"last first {spans['last-first']:.1f}, longest first {spans['longest-first']:.1f}; {len(mutants)} mutants "
          f"caught")
    return 0


if __name__ == "__main__":
    sys.exit(main())
