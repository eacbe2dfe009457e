#!/usr/bin/env python3
"""A small byte-level GPT trained twice from one seed: once with PyTorch's SDPA and once with the
series' attention (flashsteps.attention, its forward and backward steps), to show that the two
train alike (final losses within 1%) and what each costs (tokens per second).

    python3 python/examples/train_gpt.py --out gpt.csv                    # both runs, head_dim 64 and 128
    python3 python/examples/train_gpt.py --head-dims 128 --steps 200 --out gpt.csv --png gpt.png
    python3 python/examples/train_gpt.py --dry-run                         # the plan and the data, no GPU

The text is the repository's own documentation (README.md and docs/**/*.md), as bytes: a vocabulary
of 256, no tokenizer, nothing downloaded. The last 10% of it is held out for the validation loss.

The model: n_layer pre-norm blocks (LayerNorm, causal self-attention, a 4x GELU MLP), learned
positions, the output head tied to the embedding; bf16 autocast, fp32 master weights, AdamW with
warm-up and cosine decay. The two runs differ only in the attention call: same seed, same batches
in the same order, same initial weights.

CSV rows (--out): attn, head_dim, step, loss (train, this step's batch), val_loss (at the end only),
tokens_per_s (the run's, steady state: the first --warmup-steps steps, where the steps' autotuners
pick their tiles, are not timed), device. The summary says, per head_dim, the final losses (mean of
the last 20 steps' training loss, and the validation loss) and whether they agree within 1%.
"""
import argparse
import csv
import glob
import math
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
ATTNS = ("sdpa", "flashsteps")


# ---- data (NumPy only: tested on the CPU) ---------------------------------------------------------
def corpus_paths(root=ROOT):
    """The documentation that ships with the repository, in a fixed order."""
    paths = [os.path.join(root, "README.md")] + sorted(glob.glob(os.path.join(root, "docs", "**", "*.md"),
                                                                 recursive=True))
    return [p for p in paths if os.path.isfile(p)]


def load_bytes(paths):
    """The files' bytes, concatenated with a blank line between files, as a uint8 array."""
    import numpy as np
    return np.frombuffer(b"\n\n".join(open(p, "rb").read() for p in paths), dtype=np.uint8)


def split(data, val_fraction=0.1):
    n = int(len(data) * (1 - val_fraction))
    return data[:n], data[n:]


def batch_starts(n_tokens, seq, batch, steps, seed):
    """[steps, batch] start offsets of the training windows (input seq bytes, target the next seq):
    drawn once from the seed, so that both runs see the same batches in the same order."""
    import numpy as np
    if n_tokens < seq + 2:
        raise ValueError(f"{n_tokens} bytes of text cannot fill a window of {seq} + 1")
    return np.random.default_rng(seed).integers(0, n_tokens - seq - 1, size=(steps, batch))


def windows(data, starts, seq):
    """Inputs and targets [len(starts), seq] for the given starts (uint8 -> int64)."""
    import numpy as np
    idx = np.asarray(starts)[:, None] + np.arange(seq)[None, :]
    return data[idx].astype(np.int64), data[idx + 1].astype(np.int64)


def lr_at(step, steps, lr, warmup):
    """Linear warm-up over `warmup` steps, then cosine decay to lr/10."""
    if step < warmup:
        return lr * (step + 1) / warmup
    t = (step - warmup) / max(1, steps - warmup)
    return lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, t))))


def summarize(rows, tail=20):
    """Per head_dim: each attention's final training loss (mean of the last `tail` steps), its
    validation loss, tokens/s, and whether the two attentions' final losses agree within 1%.
    rows: dicts with attn, head_dim, step, loss, val_loss, tokens_per_s (strings or numbers)."""
    out = {}
    for d in sorted({int(r["head_dim"]) for r in rows}):
        per = {}
        for a in ATTNS:
            mine = sorted((r for r in rows if int(r["head_dim"]) == d and r["attn"] == a), key=lambda r: int(r["step"]))
            if not mine:
                continue
            losses = [float(r["loss"]) for r in mine]
            vals = [float(r["val_loss"]) for r in mine if str(r.get("val_loss", "")) not in ("", "nan")]
            speed = [float(r["tokens_per_s"]) for r in mine if str(r.get("tokens_per_s", "")) not in ("", "nan")]
            per[a] = dict(train=sum(losses[-tail:]) / len(losses[-tail:]), val=vals[-1] if vals else float("nan"),
                          tokens_per_s=speed[-1] if speed else float("nan"), steps=len(mine))
        agree = None
        if all(a in per for a in ATTNS):
            x, y = per["sdpa"], per["flashsteps"]
            agree = abs(y["train"] - x["train"]) <= 0.01 * x["train"] and (
                math.isnan(x["val"]) or abs(y["val"] - x["val"]) <= 0.01 * x["val"])
        out[d] = dict(per=per, within_1pct=agree)
    return out


def summary_lines(summary):
    lines = []
    for d, s in summary.items():
        for a, v in s["per"].items():
            lines.append(f"head_dim {d} {a:10s}: final train loss {v['train']:.4f}, val loss {v['val']:.4f}, "
                         f"{v['tokens_per_s']:,.0f} tokens/s ({v['steps']} steps)")
        if s["within_1pct"] is not None:
            lines.append(f"head_dim {d}: final losses within 1%: {'yes' if s['within_1pct'] else 'NO'}")
    return lines


# ---- the model and the runs (PyTorch on a GPU) -----------------------------------------------------
def build_model(torch, vocab, seq, n_layer, n_head, head_dim, attend):
    nn, F = torch.nn, torch.nn.functional
    width = n_head * head_dim

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
            self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
            self.fc, self.out = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

        def forward(self, x):
            b, t, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, n_head, head_dim).permute(2, 0, 3, 1, 4)
            y = attend(q, k, v)  # [b, n_head, t, head_dim], causal
            x = x + self.proj(y.transpose(1, 2).reshape(b, t, width))
            return x + self.out(F.gelu(self.fc(self.ln2(x))))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok, self.pos = nn.Embedding(vocab, width), nn.Embedding(seq, width)
            self.blocks = nn.ModuleList(Block() for _ in range(n_layer))
            self.ln = nn.LayerNorm(width)
            self.head = nn.Linear(width, vocab, bias=False)
            self.head.weight = self.tok.weight  # tied
            for name, p in self.named_parameters():
                if p.dim() == 2:
                    std = 0.02 / math.sqrt(2 * n_layer) if name.endswith(("proj.weight", "out.weight")) else 0.02
                    nn.init.normal_(p, 0.0, std)
                elif name.endswith("bias"):
                    nn.init.zeros_(p)

        def forward(self, idx, targets):
            t = idx.shape[1]
            x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
            for blk in self.blocks:
                x = blk(x)
            logits = self.head(self.ln(x)).float()
            return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))

    return GPT()


def attention_fn(torch, which):
    """q, k, v [b, h, t, d] under bf16 autocast -> causal attention, by SDPA or by the series' steps."""
    F = torch.nn.functional
    if which == "sdpa":
        return lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True)
    sys.path.insert(0, os.path.join(ROOT, "python"))
    import flashsteps
    # autocast does not reach a custom op's inputs: give it bf16 (the Linear that made them ran in bf16 already)
    return lambda q, k, v: flashsteps.attention(q.to(torch.bfloat16), k.to(torch.bfloat16), v.to(torch.bfloat16),
                                                causal=True)


def train(torch, a, which, head_dim, train_data, val_data, starts, log):
    torch.manual_seed(a.seed)
    dev = torch.device("cuda")
    n_head = a.width // head_dim
    model = build_model(torch, 256, a.seq, a.layers, n_head, head_dim, attention_fn(torch, which)).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.95), weight_decay=0.1, fused=True)
    rows, t0, timed_tokens = [], None, 0
    for step in range(a.steps):
        x, y = (torch.from_numpy(w).to(dev, non_blocking=True) for w in windows(train_data, starts[step], a.seq))
        for g in opt.param_groups:
            g["lr"] = lr_at(step, a.steps, a.lr, a.warmup_steps)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step == a.warmup_steps - 1:
            torch.cuda.synchronize()
            t0 = time.perf_counter()
        elif step >= a.warmup_steps:
            timed_tokens += x.numel()
        rows.append(dict(attn=which, head_dim=head_dim, step=step, loss=float(loss), val_loss="", tokens_per_s=""))
        if step % 50 == 0 or step == a.steps - 1:
            log(f"  {which} d{head_dim} step {step}: loss {float(loss):.4f}")
    torch.cuda.synchronize()
    rate = timed_tokens / (time.perf_counter() - t0) if t0 and timed_tokens else float("nan")
    model.eval()
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        vstarts = batch_starts(len(val_data), a.seq, a.batch, a.val_batches, a.seed + 1)
        vals = [float(model(*(torch.from_numpy(w).to(dev) for w in windows(val_data, s, a.seq))))
                for s in vstarts]
    rows[-1].update(val_loss=sum(vals) / len(vals), tokens_per_s=rate)
    return rows


def parse_args(argv=None):
    ap = argparse.ArgumentParser(prog="train_gpt.py", description=__doc__.split("\n\n")[0],
                                 epilog=__doc__.split("\n\n", 1)[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--attn", choices=ATTNS + ("both",), default="both")
    ap.add_argument("--head-dims", type=int, nargs="+", default=[64, 128], choices=[64, 128])
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--width", type=int, default=512, help="model width (heads = width / head_dim; default 512)")
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--warmup-steps", type=int, default=20, help="lr warm-up, and the steps not timed")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--val-batches", type=int, default=8)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--out", help="the CSV to write (one row per training step)")
    ap.add_argument("--png", help="also draw both loss curves per head_dim (needs matplotlib)")
    ap.add_argument("--dry-run", action="store_true", help="load the text and print the plan; no PyTorch needed")
    a = ap.parse_args(argv)
    for d in a.head_dims:
        if a.width % d:
            ap.error(f"--width {a.width} is not a multiple of head_dim {d}")
    if a.steps <= a.warmup_steps:
        ap.error("--steps must exceed --warmup-steps (the timed steps come after them)")
    if a.seq < 16 or a.batch < 1 or a.layers < 1:
        ap.error("--seq >= 16, --batch >= 1, --layers >= 1")
    return a


def write_csv(path, rows, device):
    cols = ["attn", "head_dim", "step", "loss", "val_loss", "tokens_per_s", "device"]
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols)
        w.writeheader()
        for r in rows:
            w.writerow({**r, "device": device})


def plot(rows, png):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    dims = sorted({int(r["head_dim"]) for r in rows})
    fig, axes = plt.subplots(1, len(dims), figsize=(6 * len(dims), 4), squeeze=False)
    for ax, d in zip(axes[0], dims):
        for a, style in zip(ATTNS, ("-", "--")):
            mine = [r for r in rows if int(r["head_dim"]) == d and r["attn"] == a]
            ax.plot([int(r["step"]) for r in mine], [float(r["loss"]) for r in mine], style, label=a, linewidth=1)
        ax.set(title=f"head_dim {d}", xlabel="step", ylabel="training loss (nats per byte)")
        ax.legend()
    fig.tight_layout()
    fig.savefig(png, dpi=110)


def main(argv=None):
    a = parse_args(argv)
    data = load_bytes(corpus_paths())
    train_data, val_data = split(data)
    attns = ATTNS if a.attn == "both" else (a.attn,)
    print(f"text: {len(data):,} bytes of the repository's docs ({len(train_data):,} train, {len(val_data):,} held out); "
          f"{a.layers} layers, width {a.width}, seq {a.seq}, batch {a.batch}, {a.steps} steps; "
          f"attention {', '.join(attns)} at head_dim {', '.join(map(str, a.head_dims))}")
    if a.dry_run:
        return 0
    try:
        import torch
    except ImportError:
        print("train_gpt.py: PyTorch is needed (pip install torch)", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("train_gpt.py: no CUDA GPU visible to PyTorch", file=sys.stderr)
        return 3
    starts = batch_starts(len(train_data), a.seq, a.batch, a.steps, a.seed)
    rows = []
    for d in a.head_dims:
        for which in attns:
            rows += train(torch, a, which, d, train_data, val_data, starts, print)
    device = torch.cuda.get_device_name(0)
    if a.out:
        write_csv(a.out, rows, device)
    if a.png:
        plot(rows, a.png)
    summary = summarize(rows)
    print("\n".join(summary_lines(summary)))
    return 0 if all(s["within_1pct"] in (None, True) for s in summary.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
