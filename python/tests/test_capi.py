"""CPU tests of libfa_steps.so through flashsteps._lib: no PyTorch, no GPU.

The library lists every step of the build with its rules, and its refusals are the steps' own
(fa::check_attention_launch): asked of every attention step, they must form the rule it declares.
"""
import ctypes
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import flashsteps
from flashsteps import _lib as L

REPO = Path(__file__).resolve().parents[2]
PYTHON_DIR = REPO / "python"


@pytest.fixture(scope="module")
def lib():
    try:
        return flashsteps.library()
    except flashsteps.LibraryNotFound as e:
        pytest.fail(f"{e} (CTest sets FLASHSTEPS_LIB to the build's library)")


def has_gpu(lib):
    try:
        lib.device()
        return True
    except flashsteps.NoDeviceError:
        return False


def add_step_lines():
    """(name, has ARCH) of every add_step() in the top-level CMakeLists.txt, in order."""
    text = (REPO / "CMakeLists.txt").read_text()
    return [(m.group(1), "ARCH" in m.group(2)) for m in re.finditer(r"^add_step\((\w+)([^)]*)\)", text, re.M)]


def attention_steps(lib):
    """The attention steps that fa_check asks about (a paged-cache step runs through the paged calls only:
    paged_steps)."""
    return [s for s in lib.steps if s.family == "attention" and (s.has_forward or s.has_backward)]


def paged_steps(lib):
    return [s for s in lib.steps if s.has_paged_decode]


def refusal(fn, *args):
    """The UsageError message of fn(*args); fails if it is accepted or fails otherwise."""
    with pytest.raises(flashsteps.UsageError) as e:
        fn(*args)
    assert e.value.code == L.ERR_USAGE
    return str(e.value)


# ---- the library and its list of steps -----------------------------------------------------------


def test_loads_with_its_abi_version(lib):
    assert lib.lib.fa_abi_version() == L.ABI_VERSION == 2  # 2: has_paged_decode and the paged calls
    assert lib.path.is_file()


def test_another_abi_version_is_refused(lib, monkeypatch):
    """A library built against another header would read or write fa_step_info at another size."""
    monkeypatch.setattr(L, "ABI_VERSION", 1)
    with pytest.raises(flashsteps.FlashStepsError, match="has ABI version 2; this package needs 1"):
        L.Library()


def test_lists_every_step_of_the_build_in_order(lib):
    declared = add_step_lines()
    names = [s.name for s in lib.steps]
    # Every step without ARCH is in every build; a step with ARCH only where its architecture is.
    arch = dict(declared)
    assert [n for n, a in declared if not a] == [n for n in names if n in arch and not arch[n]]
    assert names == [n for n, _ in declared if n in names]
    assert [s.index for s in lib.steps] == list(range(len(names)))
    for s in lib.steps:
        assert (REPO / "steps" / s.name / "kernel.cu").is_file()
        assert s.idea


def test_prev_is_the_step_checked_against(lib):
    text = (REPO / "CMakeLists.txt").read_text()
    for s in lib.steps:
        m = re.search(rf"^add_step\({s.name}\b([^)]*)\)", text, re.M)
        prev = re.search(r"PREV (\w+)", m.group(1))
        assert s.prev == (prev.group(1) if prev else "")


def test_step_by_name_or_number(lib):
    for s in lib.steps:
        assert lib.step(s.name) == s
        assert lib.step(s.name[:2]) == s
    message = refusal(lib.step, "99")
    assert "unknown step '99'" in message and lib.steps[0].name in message


def test_the_series_steps_declare_what_the_package_relies_on(lib):
    """The defaults of attention() and decode(): their rules as the package's docstrings state them."""
    fwd, bwd, dec = lib.step("11_tuned_forward"), lib.step("16_deterministic_backward"), lib.step("22_split_kv_decode")
    for s in (fwd, bwd, dec):
        assert s.dtypes == ("fp16", "bf16") and s.max_head_dim == 128 and s.head_dim_multiple == 8
        assert s.gqa and s.positive_scale and s.needs_cc == 0
    assert fwd.has_forward and not fwd.has_backward and not fwd.has_decode
    assert bwd.has_backward and bwd.variants == ("atomic", "deterministic")
    assert dec.has_decode and not dec.has_paged_decode
    paged = lib.step("23_paged_kv_decode")
    assert paged.dtypes == dec.dtypes and paged.gqa and paged.positive_scale and paged.needs_cc == 0
    assert paged.has_paged_decode and not (paged.has_forward or paged.has_backward or paged.has_decode)
    assert [s.name for s in paged_steps(lib)] == ["23_paged_kv_decode"]
    if "19_hopper_pingpong_overlap" in [s.name for s in lib.steps]:
        hopper = lib.step("19")
        assert hopper.needs_cc == 90 and hopper.has_forward and hopper.gqa and hopper.variants[0] == "full"


def test_default_steps_by_compute_capability(lib):
    names = [s.name for s in lib.steps]
    expect_fwd = "19_hopper_pingpong_overlap" if "19_hopper_pingpong_overlap" in names else "11_tuned_forward"
    assert L.default_step("forward", 90).name == expect_fwd
    assert L.default_step("forward", 80).name == "11_tuned_forward"
    assert L.default_step("forward", 100).name == "11_tuned_forward"  # sm_90a code runs on cc 9.0 only
    for cc in (80, 90):
        assert L.default_step("backward", cc).name == "16_deterministic_backward"
        assert L.default_step("decode", cc).name == "22_split_kv_decode"
        assert L.default_step("paged_decode", cc).name == "23_paged_kv_decode"
    with pytest.raises(ValueError, match="no default step of kind 'prefill'"):
        L.default_step("prefill", 90)


def test_non_attention_steps_refuse_attention_calls(lib):
    for s in lib.steps:
        if s.family != "attention":
            assert not (s.has_forward or s.has_backward or s.has_decode or s.has_paged_decode)
            assert "not an attention step" in refusal(lib.check, s, L.params(1, 1, 1, 8, 8, 64, "fp32"))
            assert "not an attention step" in refusal(lib.check_paged, s, L.params(1, 1, 1, 1, 64, 64, "fp32"),
                                                      16, 8, 4)


# ---- each attention step's rule, asked through the ABI ------------------------------------------


def problem(step, **kw):
    """A problem the step runs: its default dtype, its largest head_dim, MHA, positive scale."""
    args = dict(batch=2, heads=4, kv_heads=4, seq_q=33, seq_k=47, head_dim=step.max_head_dim,
                dtype=step.dtypes[0], causal=False, scale=None, variant=0)
    args.update(kw)
    return L.params(**args)


def test_every_dtype_a_step_declares_is_accepted_and_no_other(lib):
    for s in attention_steps(lib):
        for dtype in L.DTYPES:
            p = problem(s, dtype=dtype)
            if dtype in s.dtypes:
                lib.check(s, p)
            else:
                message = refusal(lib.check, s, p)
                assert message.startswith(f"{s.name}: this step computes in {'/'.join(s.dtypes)} only"), message


def test_head_dim_rule(lib):
    for s in attention_steps(lib):
        lib.check(s, problem(s, head_dim=s.head_dim_multiple))
        lib.check(s, problem(s, head_dim=s.max_head_dim))
        bad = [s.max_head_dim + s.head_dim_multiple]
        if s.head_dim_multiple > 1:
            bad.append(s.head_dim_multiple + 1)
        for d in bad:
            message = refusal(lib.check, s, problem(s, head_dim=d))
            rule = f"head_dim must be a multiple of {s.head_dim_multiple} and at most {s.max_head_dim} (got {d})"
            assert rule in message


def test_gqa_only_where_declared(lib):
    for s in attention_steps(lib):
        for kv_heads in (2, 1):
            p = problem(s, heads=4, kv_heads=kv_heads)
            if s.gqa:
                lib.check(s, p)
            else:
                assert "no grouped-query attention" in refusal(lib.check, s, p)
        assert "must be a multiple of the K/V heads (3)" in refusal(lib.check, s, problem(s, heads=4, kv_heads=3))


def test_scale_sizes_and_variants(lib):
    for s in attention_steps(lib):
        negative = problem(s, scale=-0.5)
        if s.positive_scale:
            assert "the softmax scale must be positive" in refusal(lib.check, s, negative)
        else:
            lib.check(s, negative)
        for field in ("batch", "seq_q", "seq_k", "head_dim"):
            assert "every size must be at least 1" in refusal(lib.check, s, problem(s, **{field: 0}))
        assert "the query heads (0)" in refusal(lib.check, s, problem(s, heads=0, kv_heads=0))
        n = max(1, len(s.variants))
        lib.check(s, problem(s, variant=n - 1))
        assert f"no variant {n}" in refusal(lib.check, s, problem(s, variant=n))
        assert "no variant -1" in refusal(lib.check, s, problem(s, variant=-1))


def test_directions(lib):
    with_backward = [s.name for s in attention_steps(lib) if s.has_backward]
    with_cache = [s.name for s in attention_steps(lib) if s.has_decode]
    for s in attention_steps(lib):
        if s.has_backward:
            lib.check(s, problem(s), L.BACKWARD)
        else:
            message = refusal(lib.check, s, problem(s), L.BACKWARD)
            assert f"{s.name}: has no backward" in message and all(n in message for n in with_backward)
        if s.has_decode:
            lib.check(s, problem(s, seq_q=1), L.DECODE)
        else:
            message = refusal(lib.check, s, problem(s, seq_q=1), L.DECODE)
            assert f"{s.name}: runs no KV cache" in message and all(n in message for n in with_cache)
        assert "direction 7 is not" in refusal(lib.check, s, problem(s), 7)


def test_decode_step_refuses_a_prefill(lib):
    s = lib.step("22_split_kv_decode")
    lib.check(s, problem(s, seq_q=64), L.DECODE)
    assert "seq_q at most 64" in refusal(lib.check, s, problem(s, seq_q=65), L.DECODE)


# ---- the paged calls: fa_check_paged, fa_workspace_size_paged, fa_decode_paged -------------------

PAGES = dict(page_size=16, num_pages=40, max_pages=8)  # 8 pages of 16 keys per sequence: capacity 128


def paged_problem(step, **kw):
    """A paged decode problem the step runs: its capacity seq_k = max_pages * page_size of PAGES."""
    return problem(step, **dict(dict(seq_q=1, seq_k=PAGES["max_pages"] * PAGES["page_size"]), **kw))


def pages(**kw):
    d = dict(PAGES, **kw)
    return d["page_size"], d["num_pages"], d["max_pages"]


def test_a_paged_step_runs_through_the_paged_calls_only(lib):
    contiguous = [s.name for s in lib.steps if s.has_decode]
    for s in paged_steps(lib):
        lib.check_paged(s, paged_problem(s), *pages())
        for direction in (L.FORWARD, L.DECODE):
            message = refusal(lib.check, s, paged_problem(s), direction)
            assert message.startswith(f"{s.name}: reads a paged KV cache only: call fa_decode_paged"), message
            assert all(n in message for n in contiguous)
        message = refusal(lib.decode, s, paged_problem(s), *([FAKE] * 6), FAKE, 1 << 30)  # fa_decode
        assert message.startswith(f"{s.name}: reads a paged KV cache only: call fa_decode_paged"), message
        assert refusal(lib.forward, s, paged_problem(s), *([FAKE] * 5), FAKE, 1 << 30).startswith(
            f"{s.name}: reads a paged KV cache only")


def test_a_step_without_a_paged_cache_refuses_the_paged_calls(lib):
    with_pages = [s.name for s in paged_steps(lib)]
    assert with_pages
    for s in lib.steps:
        if s.family != "attention" or s.has_paged_decode:
            continue
        message = refusal(lib.check_paged, s, paged_problem(s), *pages())
        assert message.startswith(f"{s.name}: runs no paged KV cache (fa_decode_paged: "), message
        assert all(n in message for n in with_pages)
        assert ("it reads a contiguous one through fa_decode" in message) == s.has_decode
        # The launch call too, before any device: every pointer is a valid fake.
        args = (*pages(), *([FAKE] * 7), FAKE, 1 << 30)
        assert refusal(lib.decode_paged, s, paged_problem(s), *args) == message


def test_paged_step_rule(lib):
    """The step's own rule (fa::check_attention_launch) through the paged calls: dtypes, head_dim, GQA,
    the decode limit on seq_q, the scale."""
    for s in paged_steps(lib):
        for dtype in L.DTYPES:
            p = paged_problem(s, dtype=dtype)
            if dtype in s.dtypes:
                lib.check_paged(s, p, *pages())
            else:
                assert f"this step computes in {'/'.join(s.dtypes)} only" in refusal(lib.check_paged, s, p, *pages())
        assert f"head_dim must be a multiple of {s.head_dim_multiple}" in refusal(
            lib.check_paged, s, paged_problem(s, head_dim=s.max_head_dim + s.head_dim_multiple), *pages())
        lib.check_paged(s, paged_problem(s, heads=8, kv_heads=1), *pages())  # MQA
        assert "must be a multiple of the K/V heads (3)" in refusal(
            lib.check_paged, s, paged_problem(s, heads=4, kv_heads=3), *pages())
        assert "seq_q at most 64" in refusal(lib.check_paged, s, paged_problem(s, seq_q=65), *pages())
        assert "the softmax scale must be positive" in refusal(lib.check_paged, s, paged_problem(s, scale=-1.0),
                                                               *pages())
        assert "every size must be at least 1" in refusal(lib.check_paged, s, paged_problem(s, batch=0), *pages())


def test_page_parameters(lib):
    s = lib.step("23_paged_kv_decode")
    p = paged_problem(s)
    assert refusal(lib.check_paged, s, p, *pages(page_size=0)) == \
        "23_paged_kv_decode: a paged KV cache needs a page size of at least 1 (got 0)"
    rule = "a paged KV cache needs a page size, a page count and pages per sequence of at least 1"
    for bad in (dict(page_size=-16), dict(num_pages=0), dict(max_pages=0), dict(num_pages=-1)):
        assert rule in refusal(lib.check_paged, s, p, *pages(**bad)), bad
    # The capacity (seq_k) is what a row of the table reaches, and no more: 8 pages of 16 keys.
    lib.check_paged(s, paged_problem(s, seq_k=128), *pages())
    lib.check_paged(s, paged_problem(s, seq_k=1), *pages())
    lib.check_paged(s, paged_problem(s, seq_k=129), *pages(page_size=1, max_pages=129))  # pages of one key
    message = refusal(lib.check_paged, s, paged_problem(s, seq_k=129), *pages())
    assert "seq_k (129, the capacity) must be at most max_pages·page_size = 8·16" in message
    # Sizes whose product passes 2^31 are compared without overflow.
    lib.check_paged(s, paged_problem(s, seq_k=2**31 - 1), *pages(page_size=2**20, max_pages=2**12))
    # The same refusals from the size query and the launch, before any device.
    assert "(got 0)" in refusal(lib.workspace_size_paged, s, p, *pages(page_size=0))
    assert "(got 0)" in refusal(lib.decode_paged, s, p, *pages(page_size=0), *([FAKE] * 7), FAKE, 1 << 30)
    assert "must be at most max_pages·page_size" in refusal(lib.decode_paged, s, paged_problem(s, seq_k=129),
                                                            *pages(), *([FAKE] * 7), FAKE, 1 << 30)


def test_paged_pointers_are_named(lib):
    s = lib.step("23_paged_kv_decode")
    p = paged_problem(s)
    names = ("Q", "the K pages", "the V pages", "block_table", "cache_seqlens", "O", "LSE")
    for i, name in enumerate(names):
        args = [FAKE] * 7
        args[i] = None
        assert refusal(lib.decode_paged, s, p, *pages(), *args, FAKE, 1 << 30) == f"23_paged_kv_decode: {name} is null"
    for i, name in enumerate(names):
        if name in ("block_table", "cache_seqlens", "LSE"):  # int32 and fp32 arrays: no 16-byte vector loads
            continue
        args = [FAKE] * 7
        args[i] = FAKE + 8
        assert refusal(lib.decode_paged, s, p, *pages(), *args, FAKE, 1 << 30) == \
            f"23_paged_kv_decode: {name} must be 16-byte aligned (16-byte vector loads)"
    message = refusal(lib.decode_paged, s, paged_problem(s, dtype="fp32"), *pages(), *([None] * 7))
    assert "computes in fp16/bf16 only" in message  # the rule before the pointers
    assert lib.lib.fa_check_paged(s.index, None, *pages()) == L.ERR_USAGE
    assert "null" in lib.lib.fa_last_error().decode()


def test_paged_workspace(lib):
    s = lib.step("23_paged_kv_decode")
    # Splits (and their workspace) only where the cache is long and the rows few: one sequence, one K/V head,
    # 64k keys in 4096 pages of 16. Without a device the step plans for its most splits; on any, for at
    # least two here. The workspace holds each split's partial O and LSE: a whole number of those.
    p = paged_problem(s, batch=1, heads=1, kv_heads=1, seq_k=65536)
    shape = pages(page_size=16, num_pages=4096, max_pages=4096)
    n = lib.workspace_size_paged(s, p, *shape)
    per_split = 1 * 1 * 1 * (s.max_head_dim + 1) * 4
    assert n >= 2 * per_split and n % per_split == 0
    message = refusal(lib.decode_paged, s, p, *shape, *([FAKE] * 7))
    assert f"needs a workspace of {n} bytes" in message and "given none" in message
    message = refusal(lib.decode_paged, s, p, *shape, *([FAKE] * 7), FAKE, n - 1)
    assert f"given {n - 1} bytes" in message
    assert lib.lib.fa_workspace_size_paged(s.index, ctypes.byref(p), *shape, None) == L.ERR_USAGE
    assert "null output" in lib.lib.fa_last_error().decode()
    # Many rows fill the SMs without splitting: no workspace on a device. Without one, the step plans
    # for its most splits: a workspace either way, never a refusal.
    assert lib.workspace_size_paged(s, paged_problem(s, batch=64, heads=32, kv_heads=8), *pages()) >= 0


def test_an_accepted_paged_call_without_a_gpu_says_so(lib):
    if has_gpu(lib):
        pytest.skip("a GPU is present: a call with fake pointers would launch")
    s = lib.step("23_paged_kv_decode")
    p = paged_problem(s)
    n = lib.workspace_size_paged(s, p, *pages())
    with pytest.raises(flashsteps.NoDeviceError) as e:
        lib.decode_paged(s, p, *pages(), *([FAKE] * 7), FAKE, max(n, 1))
    assert e.value.code == L.ERR_NO_DEVICE and "no usable CUDA device" in str(e.value)


def test_bad_dtype_code_and_null_problem(lib):
    s = lib.step("11")
    p = problem(s)
    p.dtype = 7
    assert "dtype 7 is not one of" in refusal(lib.check, s, p)
    assert lib.lib.fa_check(s.index, None, L.FORWARD) == L.ERR_USAGE
    assert "null" in lib.lib.fa_last_error().decode()


def test_workspace_sizes(lib):
    bwd = lib.step("16_deterministic_backward")
    p = problem(bwd)
    n = lib.workspace_size(bwd, p, L.BACKWARD)
    assert n >= 2 * 4 * 33 * 128 * 4  # dQ_accum in fp32 at least
    assert lib.workspace_size(bwd, problem(bwd, variant=1), L.BACKWARD) >= n  # and the counters
    assert lib.workspace_size("11", problem(bwd), L.FORWARD) == 0
    # A backward step that borrows a forward needs that forward's workspace too (20's is 19's tile counter).
    if "20_hopper_backward" in [s.name for s in lib.steps]:  # built for sm_90a
        hop = lib.step("20_hopper_backward")
        assert lib.workspace_size(hop, problem(hop), L.FORWARD) == lib.workspace_size("19", problem(hop), L.FORWARD) > 0
    dec = lib.step("22")
    # Splits (and their workspace) only where the cache is long and the rows few: one sequence, one K/V head,
    # 64k keys, split on any device (without one, the most splits are assumed).
    long_cache = problem(dec, batch=1, heads=1, kv_heads=1, seq_q=1, seq_k=65536)
    assert lib.workspace_size(dec, long_cache, L.DECODE) > 0
    assert "head_dim must be" in refusal(lib.workspace_size, bwd, problem(bwd, head_dim=130), L.BACKWARD)


# ---- the launch calls: argument refusals before any device ------------------------------------

FAKE = 1 << 20  # a 16-byte aligned address that is never dereferenced: every call below is refused


def test_null_and_misaligned_pointers_are_named(lib):
    s = lib.step("11")
    p = problem(s)
    ptrs = [FAKE] * 5
    for i, name in enumerate(("Q", "K", "V", "O", "LSE")):
        args = list(ptrs)
        args[i] = None
        assert refusal(lib.forward, s, p, *args) == f"11_tuned_forward: {name} is null"
    for i, name in enumerate(("Q", "K", "V", "O")):
        args = list(ptrs)
        args[i] = FAKE + 8
        aligned = f"11_tuned_forward: {name} must be 16-byte aligned (16-byte vector loads)"
        assert refusal(lib.forward, s, p, *args) == aligned
    bwd = lib.step("16")
    names = ("Q", "K", "V", "O", "dO", "LSE", "dQ", "dK", "dV")
    for i, name in enumerate(names):
        args = [FAKE] * 9
        args[i] = None
        message = refusal(lib.backward, bwd, problem(bwd), *args, FAKE, 1 << 30)
        assert message == f"16_deterministic_backward: {name} is null"
    dec = lib.step("22")
    args = [FAKE, FAKE, FAKE, None, FAKE, FAKE, FAKE, 1 << 30]
    assert refusal(lib.decode, dec, problem(dec, seq_q=1), *args) == "22_split_kv_decode: cache_seqlens is null"


def test_the_rule_comes_before_the_pointers(lib):
    s = lib.step("11")
    message = refusal(lib.forward, s, problem(s, dtype="fp32"), None, None, None, None, None)
    assert "computes in fp16/bf16 only" in message


def test_workspace_is_required(lib):
    bwd = lib.step("16")
    p = problem(bwd)
    need = lib.workspace_size(bwd, p, L.BACKWARD)
    message = refusal(lib.backward, bwd, p, *([FAKE] * 9))
    assert f"needs a workspace of {need} bytes" in message and "given none" in message
    message = refusal(lib.backward, bwd, p, *([FAKE] * 9), FAKE, need - 1)
    assert f"given {need - 1} bytes" in message


def test_a_step_without_a_backward_refuses_one(lib):
    message = refusal(lib.backward, "11", problem(lib.step("11")), *([FAKE] * 9))
    assert "11_tuned_forward: has no backward" in message


def test_an_accepted_call_without_a_gpu_says_so(lib):
    if has_gpu(lib):
        pytest.skip("a GPU is present: a call with fake pointers would launch")
    s = lib.step("11")
    with pytest.raises(flashsteps.NoDeviceError) as e:
        lib.forward(s, problem(s), *([FAKE] * 5))
    assert e.value.code == L.ERR_NO_DEVICE
    assert "no usable CUDA device" in str(e.value) and "compute capability 8.0" in str(e.value)
    with pytest.raises(flashsteps.NoDeviceError):
        lib.device()
    assert "no usable CUDA device" in lib.runs_here(s)


def test_the_message_is_per_thread(lib):
    refusal(lib.step, "98")
    seen = {}

    def other():
        seen["before"] = lib.lib.fa_last_error().decode()
        refusal(lib.step, "97")
        seen["after"] = lib.lib.fa_last_error().decode()

    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert seen["before"] == "" and "'97'" in seen["after"]
    assert "'98'" in lib.lib.fa_last_error().decode()
    assert lib.lib.fa_step_count() == len(lib.steps)  # a call that cannot fail leaves it alone
    lib.check("11", problem(lib.step("11")))
    assert lib.lib.fa_last_error().decode() == ""  # a call that succeeds clears it


def test_step_info_out_of_range(lib):
    info = L._StepInfo()
    assert lib.lib.fa_step_info_get(len(lib.steps), ctypes.byref(info)) == L.ERR_USAGE
    assert "no step with index" in lib.lib.fa_last_error().decode()
    assert lib.lib.fa_step_variant(-1, 0) is None


# ---- the package without PyTorch, and `python -m flashsteps info` ------------------------------


def run_python(code_or_args, env_extra=None, module=False):
    env = dict(os.environ, PYTHONPATH=str(PYTHON_DIR), PYTHONDONTWRITEBYTECODE="1", **(env_extra or {}))
    args = [sys.executable] + (["-m", "flashsteps"] + code_or_args if module else ["-c", code_or_args])
    return subprocess.run(args, env=env, capture_output=True, text=True, timeout=120)


def test_imports_without_torch():
    # torch set to None in sys.modules: `import torch` raises ImportError, as where it is not installed.
    r = run_python("import sys; sys.modules['torch'] = None\n"
                   "import flashsteps\n"
                   "print(len(flashsteps.library().steps))\n"
                   "try:\n    flashsteps.attention\nexcept ImportError as e:\n    print('attention needs torch')\n")
    assert r.returncode == 0, r.stderr
    assert "attention needs torch" in r.stdout


def test_info_without_a_gpu(lib):
    r = run_python(["info"], module=True)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert f"library: {lib.path}" in out or f"library: {os.environ.get('FLASHSTEPS_LIB')}" in out
    for s in lib.steps:
        assert f"  {s.name}: " in out
    assert "16_deterministic_backward: forward + backward; fp16/bf16, head_dim a multiple of 8, at most 128, GQA, " \
           "variants atomic/deterministic" in out
    assert "22_split_kv_decode: forward + decode" in out
    assert "23_paged_kv_decode: paged decode; fp16/bf16" in out
    if has_gpu(lib):
        assert "GPU: " in out and "default forward: " in out
    else:
        assert "no GPU: no usable CUDA device" in out
        assert "default forward: " in out and "11_tuned_forward elsewhere (no GPU here to choose for)" in out
        assert "default backward: 16_deterministic_backward on sm_90" in out
        assert "default paged decode: 23_paged_kv_decode on sm_90, 23_paged_kv_decode elsewhere" in out


def test_info_names_where_it_looked_for_the_library(tmp_path):
    missing = tmp_path / "nowhere" / "libfa_steps.so"
    r = run_python(["info"], env_extra={"FLASHSTEPS_LIB": str(missing)}, module=True)
    assert r.returncode == 1
    assert f"{missing} (not there)" in r.stderr and "cmake --build build --target fa_capi" in r.stderr
    assert "FLASHSTEPS_LIB" in r.stderr


def test_a_file_that_is_not_the_library_is_named(tmp_path):
    bad = tmp_path / "libfa_steps.so"
    bad.write_text("not a library")
    r = run_python("import flashsteps; flashsteps.library()", env_extra={"FLASHSTEPS_LIB": str(bad)})
    assert r.returncode == 1 and "LibraryNotFound" in r.stderr and str(bad) in r.stderr


def test_info_usage():
    r = run_python(["frobnicate"], module=True)
    assert r.returncode == 2 and "invalid choice" in r.stderr
