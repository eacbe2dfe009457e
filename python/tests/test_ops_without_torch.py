"""CPU tests of flashsteps.ops with a stand-in for PyTorch: the wiring that needs no kernel.

A stub `torch` module records what ops.py registers (torch.library.custom_op, register_fake,
register_autograd) so that, without PyTorch, these tests check: each op's signature is one that
torch's schema inference takes (real type annotations of the supported kinds, no unsupported
defaults); the fake implementations give the real ones' shapes and dtypes; the autograd formula
returns a gradient per input and calls the backward op with its own argument order; attention()
and decode() pass the ops what they expect and refuse what the library cannot see. The real
implementations (the library on a GPU) are python.gpu's; decode() with a block table is checked
the same way against the paged op.
"""
import importlib
import inspect
import sys
import types
import typing

import pytest

import flashsteps


class Dtype:
    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return f"torch.{self.name}"


class Device:
    def __init__(self, spec):
        self.type, _, index = str(spec).partition(":")
        self.index = int(index or 0)

    def __eq__(self, other):
        return (self.type, self.index) == (other.type, other.index)

    def __repr__(self):
        return f"{self.type}:{self.index}"


class Tensor:
    """Shape, dtype and device only; contiguous() returns a marked copy."""

    def __init__(self, shape, dtype=None, device="cuda", contiguous=True):
        self.shape, self.dtype, self.device = tuple(shape), dtype or STUB.float16, Device(device)
        self.was_made_contiguous = False
        self._contiguous = contiguous

    def dim(self):
        return len(self.shape)

    def contiguous(self):
        if self._contiguous:
            return self
        t = Tensor(self.shape, self.dtype, str(self.device))
        t.was_made_contiguous = True
        return t

    def new_empty(self, shape, dtype=None):
        return Tensor(shape, dtype or self.dtype, str(self.device))


class CustomOp:
    def __init__(self, name, fn, mutates_args):
        self.name, self.fn, self.mutates_args = name, fn, mutates_args
        self.fake = self.backward = self.setup_context = None
        self.calls = []
        self.replacement = None  # set by a test: what a call returns instead of running fn

    def register_fake(self, fn):
        self.fake = fn
        return fn

    def register_autograd(self, backward, *, setup_context=None):
        self.backward, self.setup_context = backward, setup_context

    def __call__(self, *args):
        self.calls.append(args)
        return self.replacement(*args) if self.replacement else self.fn(*args)


def custom_op(name, fn=None, *, mutates_args, device_types=None, schema=None):
    def wrap(f):
        op = CustomOp(name, f, mutates_args)
        STUB.registered[name] = op
        return op

    return wrap(fn) if fn else wrap


STUB = types.ModuleType("torch")
STUB.Tensor = Tensor
STUB.float32, STUB.float16, STUB.bfloat16, STUB.float64 = (Dtype(n) for n in ("float32", "float16", "bfloat16",
                                                                              "float64"))
STUB.int32, STUB.int64, STUB.uint8 = Dtype("int32"), Dtype("int64"), Dtype("uint8")
STUB.__version__ = "stub"
STUB.registered = {}
STUB.library = types.SimpleNamespace(custom_op=custom_op)


@pytest.fixture(scope="module")
def ops():
    """flashsteps.ops imported against the stub; afterwards sys.modules as it was (python.gpu's
    tests import the real one)."""
    saved = {k: sys.modules.get(k) for k in ("torch", "flashsteps.ops")}
    sys.modules["torch"] = STUB
    sys.modules.pop("flashsteps.ops", None)
    try:
        yield importlib.import_module("flashsteps.ops")
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v
        if hasattr(flashsteps, "ops") and "ops" in vars(flashsteps):
            delattr(flashsteps, "ops")


# What torch.library's schema inference takes (torch/_library/infer_schema.py): these annotations,
# as types (not strings), and defaults that are int, float, bool or None.
PARAM_TYPES = {Tensor, int, float, bool, str, typing.Optional[Tensor], typing.Optional[int],
               typing.Optional[float], typing.Optional[bool]}


def test_registers_four_ops_with_fakes(ops):
    assert set(STUB.registered) == {"flashsteps::attention_forward", "flashsteps::attention_backward",
                                    "flashsteps::decode", "flashsteps::decode_paged"}
    for op in STUB.registered.values():
        assert op.fake is not None, op.name
        assert op.mutates_args == ()
    assert STUB.registered["flashsteps::attention_forward"].backward is not None
    assert STUB.registered["flashsteps::attention_forward"].setup_context is not None
    assert STUB.registered["flashsteps::decode"].backward is not None  # a clear refusal, not torch's
    assert STUB.registered["flashsteps::decode_paged"].backward is not None


def test_signatures_are_ones_torch_infers_a_schema_for(ops):
    for op in STUB.registered.values():
        sig = inspect.signature(op.fn)
        for name, p in sig.parameters.items():
            assert p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY), (op.name, name)
            assert p.annotation in PARAM_TYPES, (op.name, name, p.annotation)
            assert p.default is p.empty or p.default is None or isinstance(p.default, (int, float, bool))
        ret = sig.return_annotation
        assert typing.get_origin(ret) is tuple and all(a is Tensor for a in typing.get_args(ret)), op.name
        # the fake takes the same arguments
        assert list(inspect.signature(op.fake).parameters) == list(sig.parameters), op.name


def test_fakes_give_the_real_shapes(ops):
    q, k = Tensor((2, 8, 33, 64)), Tensor((2, 2, 47, 64))
    f32 = STUB.float32
    o, lse = STUB.registered["flashsteps::attention_forward"].fake(q, k, k, True, None, "", "", False)
    assert (o.shape, o.dtype, lse.shape, lse.dtype) == (q.shape, q.dtype, (2, 8, 33), f32)
    dq, dk, dv = STUB.registered["flashsteps::attention_backward"].fake(q, q, k, k, q, lse, True, None, "", "", False)
    assert (dq.shape, dk.shape, dv.shape) == (q.shape, k.shape, k.shape)
    o, lse = STUB.registered["flashsteps::decode"].fake(q, k, k, Tensor((2,), STUB.int32), False, None, "")
    assert (o.shape, lse.shape, lse.dtype) == (q.shape, (2, 8, 33), f32)
    pages, table = Tensor((40, 16, 2, 64)), Tensor((2, 8), STUB.int32)
    o, lse = STUB.registered["flashsteps::decode_paged"].fake(q, pages, pages, Tensor((2,), STUB.int32), table, False,
                                                              None, "")
    assert (o.shape, o.dtype, lse.shape, lse.dtype) == (q.shape, q.dtype, (2, 8, 33), f32)


class Ctx:
    def save_for_backward(self, *tensors):
        self.saved_tensors = tensors


def test_autograd_gives_a_gradient_per_input_from_the_backward_op(ops):
    fwd = STUB.registered["flashsteps::attention_forward"]
    bwd = STUB.registered["flashsteps::attention_backward"]
    q, k, v = Tensor((1, 4, 9, 64)), Tensor((1, 2, 9, 64)), Tensor((1, 2, 9, 64))
    o, lse = Tensor(q.shape), Tensor((1, 4, 9), STUB.float32)
    inputs = (q, k, v, True, 0.3, "19", "16", True)
    ctx = Ctx()
    fwd.setup_context(ctx, inputs, (o, lse))
    bwd.replacement = lambda *a: ("dq", "dk", "dv")
    dout = Tensor(q.shape, contiguous=False)
    grads = fwd.backward(ctx, dout, None)
    assert len(grads) == len(inspect.signature(fwd.fn).parameters)
    assert grads[:3] == ("dq", "dk", "dv") and all(g is None for g in grads[3:])
    args = inspect.signature(bwd.fn).bind(*bwd.calls[-1]).arguments
    assert args["dout"].was_made_contiguous
    assert (args["q"], args["k"], args["v"], args["o"], args["lse"]) == (q, k, v, o, lse)
    assert (args["causal"], args["scale"], args["step"], args["bwd_step"], args["deterministic"]) == \
           (True, 0.3, "19", "16", True)


def test_decode_has_no_gradient(ops):
    for name in ("flashsteps::decode", "flashsteps::decode_paged"):
        with pytest.raises(NotImplementedError, match="decode has no backward"):
            STUB.registered[name].backward(Ctx(), None, None)


def forward_args(ops, **kw):
    fwd = STUB.registered["flashsteps::attention_forward"]
    fwd.replacement = lambda q, *rest: (Tensor(q.shape), None)
    q = kw.pop("q", Tensor((2, 8, 16, 64), contiguous=False))
    k = kw.pop("k", Tensor((2, 2, 20, 64)))
    ops.attention(q, k, k, **kw)
    return inspect.signature(fwd.fn).bind(*fwd.calls[-1]).arguments


def test_attention_passes_the_op_what_it_expects(ops):
    a = forward_args(ops)
    assert a["q"].was_made_contiguous
    assert (a["causal"], a["scale"], a["step"], a["bwd_step"], a["deterministic"]) == (False, None, "", "", False)
    a = forward_args(ops, causal=1, scale=1, step=11, deterministic=True)
    assert (a["causal"], a["scale"], a["step"], a["bwd_step"], a["deterministic"]) == (True, 1.0, "11", "", True)
    assert isinstance(a["scale"], float)
    a = forward_args(ops, step=("19", "16_deterministic_backward"))
    assert (a["step"], a["bwd_step"]) == ("19", "16_deterministic_backward")


@pytest.mark.parametrize("bad, message", [
    (dict(q=Tensor((8, 16, 64))), "q must be 4-D"),
    (dict(q=Tensor((2, 8, 16, 64), device="cpu")), "q is on cpu:0; the steps run on CUDA tensors"),
    (dict(q=Tensor((2, 8, 16, 64), dtype=STUB.float64)), "q is torch.float64"),
    (dict(q=Tensor((2, 8, 16, 64), dtype=STUB.bfloat16)), "one dtype"),
    (dict(q=Tensor((2, 8, 16, 64), device="cuda:1")), "one device"),
    (dict(q=Tensor((3, 8, 16, 64))), "must agree in batch and head_dim"),
    (dict(q=Tensor((2, 8, 16, 128))), "must agree in batch and head_dim"),
])
def test_attention_refuses_what_the_library_cannot_see(ops, bad, message):
    with pytest.raises(flashsteps.UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
        forward_args(ops, **bad)


def test_attention_k_and_v_must_agree(ops):
    q, k = Tensor((2, 8, 16, 64)), Tensor((2, 2, 20, 64))
    with pytest.raises(flashsteps.UsageError, match="k and v must have one shape"):
        ops.attention(q, k, Tensor((2, 2, 21, 64)))


def test_decode_passes_and_refuses(ops):
    op = STUB.registered["flashsteps::decode"]
    op.replacement = lambda q, *rest: (Tensor(q.shape), None)
    q, kc = Tensor((3, 8, 1, 128)), Tensor((3, 2, 1000, 128), contiguous=False)
    ops.decode(q, kc, kc, Tensor((3,), STUB.int64), causal=True, step=22)
    a = inspect.signature(op.fn).bind(*op.calls[-1]).arguments
    assert a["k_cache"].was_made_contiguous and (a["causal"], a["scale"], a["step"]) == (True, None, "22")
    with pytest.raises(flashsteps.UsageError, match=r"shape \[batch\] = \[3\]"):
        ops.decode(q, kc, kc, Tensor((2,), STUB.int32))
    with pytest.raises(flashsteps.UsageError, match="int32 or int64"):
        ops.decode(q, kc, kc, Tensor((3,), STUB.float32))


# ---- decode with a block table: the paged op -----------------------------------------------------


def paged_args(ops, q=None, k=None, v=None, lens=None, table=None, **kw):
    """decode() with a block table, through the stubbed paged op: the arguments the op was given."""
    for name in ("flashsteps::decode", "flashsteps::decode_paged"):
        STUB.registered[name].replacement = lambda q, *rest: (Tensor(q.shape), None)
        STUB.registered[name].calls.clear()
    q = q or Tensor((3, 8, 2, 128))
    k = k or Tensor((50, 16, 2, 128), contiguous=False)
    ops.decode(q, k, v or k, lens or Tensor((3,), STUB.int32), block_table=table or Tensor((3, 9), STUB.int32), **kw)
    assert not STUB.registered["flashsteps::decode"].calls  # the contiguous op is not the one called
    op = STUB.registered["flashsteps::decode_paged"]
    return inspect.signature(op.fn).bind(*op.calls[-1]).arguments


def test_decode_with_a_block_table_calls_the_paged_op(ops):
    table = Tensor((3, 9), STUB.int32, contiguous=False)
    a = paged_args(ops, table=table, causal=1, scale=1, step=23)
    assert a["k_pages"].was_made_contiguous and a["v_pages"].was_made_contiguous
    assert a["block_table"].was_made_contiguous and a["block_table"].shape == (3, 9)
    assert (a["causal"], a["scale"], a["step"]) == (True, 1.0, "23") and isinstance(a["scale"], float)
    a = paged_args(ops)
    assert (a["causal"], a["scale"], a["step"]) == (False, None, "")
    # Any pool: more or fewer pages than the batch has sequences, one K/V head (MQA).
    paged_args(ops, k=Tensor((1, 256, 1, 128)))


@pytest.mark.parametrize("bad, message", [
    (dict(k=Tensor((2, 16, 128))), r"k must be 4-D \[num_pages, page_size, kv_heads, head_dim\]"),
    (dict(k=Tensor((50, 16, 2, 64))), r"the pages \(50, 16, 2, 64\) must agree in head_dim"),
    (dict(v=Tensor((50, 8, 2, 128))), "k and v must have one shape"),
    (dict(k=Tensor((50, 16, 2, 128), dtype=STUB.bfloat16)), "one dtype"),
    (dict(table=Tensor((3,), STUB.int32)), r"block_table must be 2-D \[batch, max_pages\] with batch = 3 "
                                           r"\(got shape \(3,\)\)"),
    (dict(table=Tensor((2, 9), STUB.int32)), r"with batch = 3 \(got shape \(2, 9\)\)"),
    (dict(table=Tensor((3, 9), STUB.int64)), r"block_table must be int32 \(got torch.int64\)"),
    (dict(table=Tensor((3, 9), STUB.int32, device="cpu")), r"block_table is on cpu:0; it must be on q's device"),
    (dict(table=Tensor((3, 9), STUB.int32, device="cuda:1")), "it must be on q's device"),
    (dict(lens=Tensor((2,), STUB.int32)), r"shape \[batch\] = \[3\]"),
    (dict(lens=Tensor((3,), STUB.float32)), "int32 or int64"),
])
def test_decode_with_a_block_table_refuses_what_the_library_cannot_see(ops, bad, message):
    with pytest.raises(flashsteps.UsageError, match=message):
        paged_args(ops, **bad)
    assert not STUB.registered["flashsteps::decode_paged"].calls  # refused before the op


def test_decode_with_a_block_table_that_is_not_a_tensor(ops):
    with pytest.raises(TypeError, match="block_table must be a torch.Tensor"):
        ops.decode(Tensor((3, 8, 1, 128)), Tensor((50, 16, 2, 128)), Tensor((50, 16, 2, 128)),
                   Tensor((3,), STUB.int32), block_table=[[0, 1]] * 3)


def test_without_a_block_table_pages_are_not_a_cache(ops):
    """Pages passed without their table read as a contiguous cache: its batch must then agree with q."""
    with pytest.raises(flashsteps.UsageError, match="must agree in batch and head_dim"):
        ops.decode(Tensor((3, 8, 1, 128)), Tensor((50, 16, 2, 128)), Tensor((50, 16, 2, 128)), Tensor((3,), STUB.int32))
