"""python/examples/train_gpt.py without PyTorch or a GPU: its data, batches, schedule, arguments and the
summary that decides whether the two attentions trained alike."""
import importlib.util
import math
import os

import pytest

np = pytest.importorskip("numpy", reason="NumPy is not installed (apt-get install python3-numpy)")

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("train_gpt", os.path.join(HERE, "..", "examples", "train_gpt.py"))
gpt = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gpt)


def test_the_corpus_is_the_repository_docs():
    paths = gpt.corpus_paths()
    assert paths[0].endswith("README.md") and len(paths) > 10
    assert all(p.endswith(".md") for p in paths) and paths[1:] == sorted(paths[1:])
    data = gpt.load_bytes(paths)
    sizes = [os.path.getsize(p) for p in paths]
    assert data.dtype == np.uint8 and len(data) == sum(sizes) + 2 * (len(paths) - 1)
    train, val = gpt.split(data)
    assert len(train) + len(val) == len(data) and abs(len(val) / len(data) - 0.1) < 1e-3
    assert bytes(train[:10]) == bytes(data[:10]) and bytes(val[-10:]) == bytes(data[-10:])


def test_batches_are_the_seeds_and_targets_are_the_next_bytes():
    data = np.arange(1000, dtype=np.int64).astype(np.uint8)
    a = gpt.batch_starts(len(data), 64, 4, 10, seed=7)
    assert a.shape == (10, 4) and a.min() >= 0 and a.max() <= len(data) - 64 - 2
    assert (a == gpt.batch_starts(len(data), 64, 4, 10, seed=7)).all()        # both runs: the same batches
    assert (a != gpt.batch_starts(len(data), 64, 4, 10, seed=8)).any()
    x, y = gpt.windows(data, a[0], 64)
    assert x.shape == y.shape == (4, 64) and x.dtype == np.int64
    assert ((x.astype(np.uint8) + 1).astype(np.uint8) == y.astype(np.uint8)).all()  # y is x one byte on
    with pytest.raises(ValueError):
        gpt.batch_starts(50, 64, 1, 1, seed=0)


def test_learning_rate_schedule():
    lr, steps, warm = 1e-3, 300, 20
    assert gpt.lr_at(0, steps, lr, warm) == pytest.approx(lr / warm)
    assert gpt.lr_at(warm - 1, steps, lr, warm) == pytest.approx(lr)
    assert gpt.lr_at(warm, steps, lr, warm) == pytest.approx(lr)
    assert gpt.lr_at(steps, steps, lr, warm) == pytest.approx(lr / 10)
    mids = [gpt.lr_at(s, steps, lr, warm) for s in range(warm, steps)]
    assert all(b <= a for a, b in zip(mids, mids[1:]))  # decays monotonically after the warm-up


def rows(attn, d, losses, val, speed):
    out = [dict(attn=attn, head_dim=str(d), step=str(i), loss=str(x), val_loss="", tokens_per_s="")
           for i, x in enumerate(losses)]
    out[-1].update(val_loss=str(val), tokens_per_s=str(speed))
    return out


def test_summary_says_whether_the_losses_agree_within_one_percent():
    base = [3.0 - 0.01 * i for i in range(40)]
    close = [x * 1.005 for x in base]
    far = [x * 1.02 for x in base]
    s = gpt.summarize(rows("sdpa", 64, base, 2.8, 1e6) + rows("flashsteps", 64, close, 2.81, 1.2e6) +
                      rows("sdpa", 128, base, 2.8, 1e6) + rows("flashsteps", 128, far, 2.8, 1.1e6))
    assert s[64]["within_1pct"] is True and s[128]["within_1pct"] is False
    assert s[64]["per"]["sdpa"]["train"] == pytest.approx(sum(base[-20:]) / 20)
    assert s[64]["per"]["flashsteps"]["tokens_per_s"] == pytest.approx(1.2e6)
    # the validation losses count too
    s = gpt.summarize(rows("sdpa", 64, base, 2.8, 1e6) + rows("flashsteps", 64, base, 2.9, 1e6))
    assert s[64]["within_1pct"] is False
    # one attention alone: nothing to compare
    s = gpt.summarize(rows("sdpa", 64, base, 2.8, 1e6))
    assert s[64]["within_1pct"] is None and math.isfinite(s[64]["per"]["sdpa"]["val"])
    text = "\n".join(gpt.summary_lines(gpt.summarize(rows("sdpa", 64, base, 2.8, 1e6) +
                                                     rows("flashsteps", 64, far, 2.8, 1e6))))
    assert "within 1%: NO" in text and "tokens/s" in text


def test_arguments_and_dry_run(capsys):
    a = gpt.parse_args([])
    assert (a.attn, a.head_dims, a.seq, a.steps) == ("both", [64, 128], 1024, 300)
    for bad in (["--width", "500"], ["--steps", "10", "--warmup-steps", "20"], ["--head-dims", "96"],
                ["--seq", "8"]):
        with pytest.raises(SystemExit):
            gpt.parse_args(bad)
    assert gpt.main(["--dry-run", "--head-dims", "64"]) == 0
    assert "bytes of the repository's docs" in capsys.readouterr().out
