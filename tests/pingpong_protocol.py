#!/usr/bin/env python3
"""tests/pingpong_protocol.py: step 25's barriers, modelled and run over random interleavings (CPU test).

Step 25 (steps/25_hopper_backward_pingpong/kernel.cu) synchronises four agents per block with counts and
phase parities that are easy to get wrong by one, and a wrong one is a hang or a race on the GPU, not a
failed comparison. This model replays the kernel's sequence of barrier operations for each agent:

  producer  per tile: wait qd_empty[s] (parity (it / 2 & 1) ^ 1), arrive qd_full[s] (32 lanes)
  writer    staging c free (arrive), then per tile: staging c full (sync), free again except after the last
  consumer  c = 0, 1 (128 threads each): the loop of the kernel, the token (named barriers 6 + c) when
            ping-pong is on, ds_full / ds_empty with the kernel's parities, and the last tile's dQ

and it checks, over thousands of random schedules for 0 to 6 query tiles, with and without the token:

  - no deadlock (some agent can always move until all are done);
  - no named barrier over-arrived, and none left with arrivals when the block exits (synccheck);
  - the dSᵀ buffers: a tile is stored into a buffer only when no dQ read of it is outstanding, a dQ
    reads a tile only when both consumers have stored their halves of it, and tile 0's thrown-away
    product reads a buffer that holds nothing yet.

It models the order of operations, not the hardware: wgmma completion is immediate at the wait that
follows it. Changing a count or a parity in the kernel means changing it here; the mutants at the end
(each must fail) show that the checks can fail.
"""
import random
import sys

STAGES = 2
CONSUMER, WRITER_WARP, PRODUCER_WARP = 128, 32, 32


class NamedBarrier:
    def __init__(self, count):
        self.count, self.arrived, self.generation = count, 0, 0


class MBarrier:
    def __init__(self, count):
        self.count, self.arrived, self.completions = count, 0, 0


def consumer_ops(wg, n, pingpong, parity_store=lambda it: (it - 1) >> 1 & 1, last_pass=False, first_pass=True):
    ops = []
    take = (lambda: ops.append(("sync", 6 + wg, 256, CONSUMER))) if pingpong else (lambda: None)
    give = (lambda: ops.append(("arrive", 6 + (wg ^ 1), 256, CONSUMER))) if pingpong else (lambda: None)

    def stage():
        ops.append(("sync", 4 + wg, 160, CONSUMER))
        ops.append(("arrive", 2 + wg, 160, CONSUMER))

    if wg == 1 and n > 0 and first_pass:
        give()
    for it in range(n):
        s = it % STAGES
        ops.append(("wait", ("qd_full", s), it // STAGES & 1))
        take()  # group A: Sᵀ, dPᵀ
        give()
        ops.append(("wait", ("ds_empty", it % 2), parity_store(it)))
        ops.append(("store", it % 2, it, wg))
        ops.append(("marrive", ("ds_full", it % 2), CONSUMER))
        if it > 0:
            ops.append(("wait", ("ds_full", (it - 1) % 2), (it - 1) // 2 & 1))
        ops.append(("read", (it + 1) % 2, it - 1 if it > 0 else None, wg))
        take()  # group B: dV, dK, dQ of the previous tile
        if wg == 0 or it + 1 < n or last_pass:
            give()
        ops.append(("marrive", ("qd_empty", s), CONSUMER))
        ops.append(("read_done", (it + 1) % 2, wg))
        ops.append(("marrive", ("ds_empty", (it + 1) % 2), CONSUMER))
        if it > 0:
            stage()
    if n > 0:
        t = n - 1
        ops.append(("wait", ("ds_full", t % 2), t // 2 & 1))
        ops.append(("read", t % 2, t, wg))
        stage()
    return ops


def producer_ops(n):
    ops = []
    for it in range(n):
        ops.append(("wait", ("qd_empty", it % STAGES), (it // STAGES & 1) ^ 1))
        ops.append(("marrive", ("qd_full", it % STAGES), PRODUCER_WARP))
    return ops


def writer_ops(n):
    if n == 0:
        return []
    ops = [("arrive", 4 + c, 160, WRITER_WARP) for c in range(2)]
    for it in range(n):
        ops += [("sync", 2 + c, 160, WRITER_WARP) for c in range(2)]
        if it + 1 < n:
            ops += [("arrive", 4 + c, 160, WRITER_WARP) for c in range(2)]
    return ops


def run(n, pingpong, seed, **mutation):
    """One random schedule; returns None, or what went wrong."""
    rnd = random.Random(seed)
    agents = {"producer": producer_ops(n), "writer": writer_ops(n),
              "consumer 0": consumer_ops(0, n, pingpong, **mutation), "consumer 1": consumer_ops(1, n, pingpong, **mutation)}
    named, waiting_on = {}, {a: None for a in agents}
    mbar = {(k, i): MBarrier(PRODUCER_WARP if k == "qd_full" else 2 * CONSUMER)
            for k in ("qd_full", "qd_empty") for i in range(STAGES)}
    mbar.update({(k, b): MBarrier(2 * CONSUMER) for k in ("ds_full", "ds_empty") for b in range(2)})
    buffers = [{"tile": None, "stored_by": set(), "reads": set()} for _ in range(2)]
    pc = {a: 0 for a in agents}

    def step(a):  # True if agent a moved
        op = agents[a][pc[a]]
        kind = op[0]
        if kind in ("sync", "arrive"):
            bar = named.setdefault(op[1], NamedBarrier(op[2]))
            if waiting_on[a] is not None:  # a sync waiting for its generation to complete
                if bar.generation > waiting_on[a]:
                    waiting_on[a], pc[a] = None, pc[a] + 1
                    return True
                return False
            bar.arrived += op[3]
            if bar.arrived > bar.count:
                raise AssertionError(f"named barrier {op[1]} over-arrived")
            if bar.arrived == bar.count:
                bar.arrived, bar.generation = 0, bar.generation + 1
            elif kind == "sync":
                waiting_on[a] = bar.generation
                return True
            pc[a] += 1
            return True
        if kind == "wait":  # try_wait.parity: passes once the phase of that parity has completed
            if mbar[op[1]].completions & 1 != op[2]:
                pc[a] += 1
                return True
            return False
        if kind == "marrive":
            m = mbar[op[1]]
            m.arrived += op[2]
            if m.arrived == m.count:
                m.arrived, m.completions = 0, m.completions + 1
            pc[a] += 1
            return True
        buf = buffers[op[1]]
        if kind == "store":
            if buf["reads"]:
                raise AssertionError(f"tile {op[2]} stored into buffer {op[1]} while dQ reads of it are outstanding")
            if buf["tile"] != op[2]:
                buffers[op[1]] = buf = {"tile": op[2], "stored_by": set(), "reads": set()}
            buf["stored_by"].add(op[3])
        elif kind == "read":
            if op[2] is None and buf["tile"] is not None:
                raise AssertionError(f"tile 0's thrown-away dQ read buffer {op[1]} holding tile {buf['tile']}")
            if op[2] is not None and (buf["tile"] != op[2] or buf["stored_by"] != {0, 1}):
                raise AssertionError(f"dQ of tile {op[2]} read buffer {op[1]} before both halves of it were stored")
            buf["reads"].add(op[3])
        elif kind == "read_done":
            buf["reads"].discard(op[2])
        pc[a] += 1
        return True

    while True:
        live = [a for a in agents if pc[a] < len(agents[a])]
        if not live:
            break
        rnd.shuffle(live)
        if not any(step(a) for a in live):
            return "deadlock: " + ", ".join(f"{a} at {agents[a][pc[a]]}" for a in live)
    pending = [i for i, b in named.items() if b.arrived]
    return f"named barriers {pending} left with arrivals at exit" if pending else None


def problems(schedules, **mutation):
    for n in range(7):
        for pingpong in (True, False):
            for seed in range(schedules):
                try:
                    why = run(n, pingpong, seed, **mutation)
                except AssertionError as e:
                    why = str(e)
                if why:
                    return f"{n} tiles, ping-pong {'on' if pingpong else 'off'}, schedule {seed}: {why}"
    return None


def main():
    why = problems(600)
    if why:
        print("FAIL:", why)
        return 1
    print("step 25's barriers: no deadlock, no pending or over-arrived named barrier, no dSᵀ race "
          "(0-6 tiles, ping-pong on and off, 600 schedules each)")
    mutants = {"consumer 1 hands the turn on after its last group": {"last_pass": True},
               "consumer 0 is not let go first": {"first_pass": False},
               "ds_empty's parity of tile / 2 (the count without tile 0's read)": {"parity_store": lambda it: (it // 2 & 1) ^ 1},
               "the store does not wait for ds_empty": {"parity_store": lambda it: 2}}
    failed = 0
    for name, mutation in mutants.items():
        why = problems(200, **mutation)
        print(f"  mutant '{name}': {'caught: ' + why if why else 'NOT CAUGHT'}")
        failed += why is None
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
