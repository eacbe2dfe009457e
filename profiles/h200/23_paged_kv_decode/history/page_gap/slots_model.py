#!/usr/bin/env python3
"""The offsets table's schedule, modelled on the CPU: step 23 as committed (kPer 1: one tile's offsets a tile)
and with pairs.diff (kPer 2: two tiles' every other tile). Phases are the spans between barriers; every read of
a tile's offsets must find that tile's write from an earlier phase, and no phase may read and write one slot.
    python3 slots_model.py     # ok, or the first violation
"""


def check(N, kPer, kSlots=4, kStages=3):
    events = []     # (phase, kind, tile)
    ph = 0
    for u in range(kSlots // kPer):
        for mine in range(kPer):
            events.append((ph, 'w', kPer * u + mine))
    ph = 1  # prologue barrier
    for t in range(kStages - 1): events.append((ph, 'r', t))
    events.append((ph, 'r', kStages - 1))
    for t in range(N):
        ph = t + 2  # attend(t)'s barrier
        events.append((ph, 'r', t + kStages))           # load(at) of tile t+3 (read even past N: harmless junk)
        if t % kPer == 0 and t + kSlots < N:
            for mine in range(kPer): events.append((ph, 'w', t + kSlots + mine))
    # replay
    written = {}
    byphase = {}
    for p, k, x in events:
        s = x % kSlots
        byphase.setdefault((p, s), set()).add(k)
        if k == 'w':
            written[s] = (x, p)
        else:
            if x >= N: continue
            w = written.get(s)
            assert w and w[0] == x and w[1] < p, (N, kPer, 'read', x, 'phase', p, 'slot holds', w)
    for (p, s), kinds in byphase.items():
        assert kinds != {'r', 'w'}, (N, kPer, 'phase', p, 'slot', s, 'read and written')
for kPer in (1, 2):
    for N in range(0, 40):
        check(N, kPer)
print("ok")
