"""The C ABI of libfa_steps.so (capi/fa_steps.h) through ctypes: no PyTorch needed.

The library is looked for at the path in $FLASHSTEPS_LIB when it is set (and nowhere else); otherwise
libfa_steps.so beside this package, then build/lib/libfa_steps.so of the repository this package sits in (``cmake --build build
--target fa_capi`` writes it there).
"""
from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass
from pathlib import Path

LIB_NAME = "libfa_steps.so"
ENV_LIB = "FLASHSTEPS_LIB"
ABI_VERSION = 2  # FA_ABI_VERSION of the header this module is written against (2: the paged calls)

# enum fa_status, fa_dtype, fa_family, fa_direction (capi/fa_steps.h)
OK, ERR_CUDA, ERR_USAGE, ERR_NO_DEVICE, ERR_WRONG_DEVICE, ERR_INTERNAL = range(6)
DTYPES = ("fp32", "fp16", "bf16")
FAMILIES = ("softmax", "matmul", "attention")
FORWARD, BACKWARD, DECODE = range(3)


class FlashStepsError(RuntimeError):
    """A call of the library failed: `code` is its status (the series' exit codes)."""

    def __init__(self, message: str, code: int = ERR_INTERNAL):
        super().__init__(message)
        self.code = code


class UsageError(FlashStepsError, ValueError):
    """The step refuses the arguments (dtype, head_dim, shape, pointer, direction)."""


class NoDeviceError(FlashStepsError):
    """No usable CUDA device, or no driver."""


class WrongDeviceError(FlashStepsError):
    """The step's kernels need another GPU (e.g. the Hopper steps on anything but sm_90)."""


class LibraryNotFound(FlashStepsError, ImportError):
    """libfa_steps.so was not found where it is looked for."""


_ERRORS = {ERR_USAGE: UsageError, ERR_NO_DEVICE: NoDeviceError, ERR_WRONG_DEVICE: WrongDeviceError}


class _StepInfo(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("idea", ctypes.c_char_p),
        ("prev", ctypes.c_char_p),
        ("workspace_note", ctypes.c_char_p),
        ("family", ctypes.c_int),
        ("has_forward", ctypes.c_int),
        ("has_backward", ctypes.c_int),
        ("has_decode", ctypes.c_int),
        ("needs_cc", ctypes.c_int),
        ("n_dtypes", ctypes.c_int),
        ("dtypes", ctypes.c_int * 3),
        ("max_head_dim", ctypes.c_int),
        ("head_dim_multiple", ctypes.c_int),
        ("positive_scale", ctypes.c_int),
        ("gqa", ctypes.c_int),
        ("max_batch_heads", ctypes.c_longlong),
        ("n_variants", ctypes.c_int),
        ("has_paged_decode", ctypes.c_int),
    ]


class AttnParams(ctypes.Structure):
    """fa_attn_params: one attention problem."""

    _fields_ = [
        ("batch", ctypes.c_int),
        ("heads", ctypes.c_int),
        ("kv_heads", ctypes.c_int),
        ("seq_q", ctypes.c_int),
        ("seq_k", ctypes.c_int),
        ("head_dim", ctypes.c_int),
        ("dtype", ctypes.c_int),
        ("causal", ctypes.c_int),
        ("scale", ctypes.c_float),
        ("variant", ctypes.c_int),
    ]


def params(batch, heads, kv_heads, seq_q, seq_k, head_dim, dtype, causal=False, scale=None, variant=0):
    """An AttnParams; dtype by name ("fp16") or number, scale 1/sqrt(head_dim) when None."""
    if isinstance(dtype, str):
        dtype = DTYPES.index(dtype)
    if scale is None:
        scale = head_dim ** -0.5 if head_dim > 0 else 1.0
    return AttnParams(batch, heads, kv_heads, seq_q, seq_k, head_dim, dtype, int(bool(causal)), scale, variant)


@dataclass(frozen=True)
class Step:
    """What a step of the library runs (its StepInfo, host/ops.h)."""

    index: int
    name: str
    idea: str
    prev: str
    family: str
    has_forward: bool
    has_backward: bool
    has_decode: bool  # a contiguous KV cache (decode without a block table)
    has_paged_decode: bool  # a paged KV cache (decode with a block table), and nothing else
    needs_cc: int  # major*10 + minor of the one GPU it runs on; 0: any the build targets
    dtypes: tuple  # ("fp16", "bf16"): the first is its default
    max_head_dim: int
    head_dim_multiple: int
    positive_scale: bool
    gqa: bool
    variants: tuple
    workspace_note: str

    def head_dim_rule(self) -> str:
        return f"a multiple of {self.head_dim_multiple}, at most {self.max_head_dim}"


_VOIDP = ctypes.c_void_p


def _candidates():
    """$FLASHSTEPS_LIB alone when it is set (the library meant, never another found instead), else
    beside the package, then the repository's build/lib/."""
    if os.environ.get(ENV_LIB):
        return [Path(os.environ[ENV_LIB])]
    here = Path(__file__).resolve().parent
    return [here / LIB_NAME, here.parent.parent / "build" / "lib" / LIB_NAME]


def _load():
    tried = []
    for path in _candidates():
        if not path.is_file():
            tried.append(f"{path} (not there)")
            continue
        try:
            lib = ctypes.CDLL(str(path))
        except OSError as e:
            tried.append(f"{path} ({e})")
            continue
        return lib, path
    raise LibraryNotFound(
        f"{LIB_NAME} not found; looked at: " + "; ".join(tried) + ". Build it with `cmake --build build --target "
        f"fa_capi` (it lands in build/lib/), or set {ENV_LIB} to its path."
    )


def _declare(lib):
    c_int, c_size_t, c_char_p = ctypes.c_int, ctypes.c_size_t, ctypes.c_char_p
    P = ctypes.POINTER(AttnParams)
    sig = {
        "fa_abi_version": (c_int, []),
        "fa_last_error": (c_char_p, []),
        "fa_step_count": (c_int, []),
        "fa_step_find": (c_int, [c_char_p, ctypes.POINTER(c_int)]),
        "fa_step_info_get": (c_int, [c_int, ctypes.POINTER(_StepInfo)]),
        "fa_step_variant": (c_char_p, [c_int, c_int]),
        "fa_device": (c_int, [ctypes.POINTER(c_int), c_char_p, c_size_t]),
        "fa_step_runs_here": (c_int, [c_int]),
        "fa_check": (c_int, [c_int, P, c_int]),
        "fa_workspace_size": (c_int, [c_int, P, c_int, ctypes.POINTER(c_size_t)]),
        "fa_forward": (c_int, [c_int, P] + [_VOIDP] * 5 + [_VOIDP, c_size_t, _VOIDP]),
        "fa_decode": (c_int, [c_int, P] + [_VOIDP] * 6 + [_VOIDP, c_size_t, _VOIDP]),
        "fa_check_paged": (c_int, [c_int, P, c_int, c_int, c_int]),
        "fa_workspace_size_paged": (c_int, [c_int, P, c_int, c_int, c_int, ctypes.POINTER(c_size_t)]),
        "fa_decode_paged": (c_int, [c_int, P, c_int, c_int, c_int] + [_VOIDP] * 7 + [_VOIDP, c_size_t, _VOIDP]),
        "fa_backward": (c_int, [c_int, P] + [_VOIDP] * 9 + [_VOIDP, c_size_t, _VOIDP]),
    }
    for name, (res, args) in sig.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args
    return lib


class Library:
    """libfa_steps.so, loaded once (library())."""

    def __init__(self):
        self.lib, self.path = _load()
        _declare(self.lib)
        version = self.lib.fa_abi_version()
        if version != ABI_VERSION:
            raise FlashStepsError(f"{self.path} has ABI version {version}; this package needs {ABI_VERSION}")
        self.steps = tuple(self._step(i) for i in range(self.lib.fa_step_count()))

    def _raise(self, code):
        if code != OK:
            message = self.lib.fa_last_error().decode()
            raise _ERRORS.get(code, FlashStepsError)(message, code)

    def _step(self, i):
        info = _StepInfo()
        self._raise(self.lib.fa_step_info_get(i, ctypes.byref(info)))
        variants = []
        while (v := self.lib.fa_step_variant(i, len(variants))) is not None:
            variants.append(v.decode())
        return Step(
            index=i,
            name=info.name.decode(),
            idea=info.idea.decode(),
            prev=info.prev.decode(),
            family=FAMILIES[info.family],
            has_forward=bool(info.has_forward),
            has_backward=bool(info.has_backward),
            has_decode=bool(info.has_decode),
            has_paged_decode=bool(info.has_paged_decode),
            needs_cc=info.needs_cc,
            dtypes=tuple(DTYPES[info.dtypes[j]] for j in range(info.n_dtypes)),
            max_head_dim=info.max_head_dim,
            head_dim_multiple=info.head_dim_multiple,
            positive_scale=bool(info.positive_scale),
            gqa=bool(info.gqa),
            variants=tuple(variants),
            workspace_note=info.workspace_note.decode(),
        )

    def step(self, name) -> Step:
        """A step by full name ("11_tuned_forward") or number ("11"); UsageError naming the steps."""
        if isinstance(name, Step):
            return name
        index = ctypes.c_int(-1)
        self._raise(self.lib.fa_step_find(str(name).encode(), ctypes.byref(index)))
        return self.steps[index.value]

    def device(self):
        """(compute capability as major*10 + minor, name) of the current device; NoDeviceError if none."""
        cc, name = ctypes.c_int(0), ctypes.create_string_buffer(256)
        self._raise(self.lib.fa_device(ctypes.byref(cc), name, len(name)))
        return cc.value, name.value.decode()

    def runs_here(self, step) -> str:
        """"" when the current device runs the step's kernels, else the reason."""
        code = self.lib.fa_step_runs_here(self.step(step).index)
        return "" if code == OK else self.lib.fa_last_error().decode()

    def check(self, step, p: AttnParams, direction=FORWARD):
        """Raises UsageError with the step's reason if it cannot run the problem (no device needed)."""
        self._raise(self.lib.fa_check(self.step(step).index, ctypes.byref(p), direction))

    def workspace_size(self, step, p: AttnParams, direction=FORWARD) -> int:
        n = ctypes.c_size_t(0)
        self._raise(self.lib.fa_workspace_size(self.step(step).index, ctypes.byref(p), direction, ctypes.byref(n)))
        return n.value

    def check_paged(self, step, p: AttnParams, page_size: int, num_pages: int, max_pages: int):
        """check() for a paged KV cache: the pages' shape beside the problem (p.seq_k the capacity,
        at most max_pages * page_size); UsageError with the reason (no device needed)."""
        self._raise(self.lib.fa_check_paged(self.step(step).index, ctypes.byref(p), page_size, num_pages, max_pages))

    def workspace_size_paged(self, step, p: AttnParams, page_size: int, num_pages: int, max_pages: int) -> int:
        n = ctypes.c_size_t(0)
        self._raise(self.lib.fa_workspace_size_paged(self.step(step).index, ctypes.byref(p), page_size, num_pages,
                                                     max_pages, ctypes.byref(n)))
        return n.value

    def forward(self, step, p, q, k, v, o, lse, workspace=None, workspace_bytes=0, stream=None):
        """Device pointers as ints (tensor.data_ptr()); stream a cudaStream_t as an int, or None."""
        self._raise(self.lib.fa_forward(self.step(step).index, ctypes.byref(p), q, k, v, o, lse, workspace,
                                        workspace_bytes, stream))

    def decode(self, step, p, q, k_cache, v_cache, cache_seqlens, o, lse, workspace=None, workspace_bytes=0,
               stream=None):
        self._raise(self.lib.fa_decode(self.step(step).index, ctypes.byref(p), q, k_cache, v_cache, cache_seqlens,
                                       o, lse, workspace, workspace_bytes, stream))

    def decode_paged(self, step, p, page_size, num_pages, max_pages, q, k_pages, v_pages, block_table, cache_seqlens,
                     o, lse, workspace=None, workspace_bytes=0, stream=None):
        """decode() over a paged cache: k_pages, v_pages [num_pages, page_size, kv_heads, head_dim],
        block_table [batch, max_pages] int32 on the device (fa_decode_paged, capi/fa_steps.h)."""
        self._raise(self.lib.fa_decode_paged(self.step(step).index, ctypes.byref(p), page_size, num_pages, max_pages,
                                             q, k_pages, v_pages, block_table, cache_seqlens, o, lse, workspace,
                                             workspace_bytes, stream))

    def backward(self, step, p, q, k, v, o, dout, lse, dq, dk, dv, workspace=None, workspace_bytes=0, stream=None):
        self._raise(self.lib.fa_backward(self.step(step).index, ctypes.byref(p), q, k, v, o, dout, lse, dq, dk, dv,
                                         workspace, workspace_bytes, stream))


_library = None


def library() -> Library:
    """The loaded library (loaded on first use); LibraryNotFound says where it looked."""
    global _library
    if _library is None:
        _library = Library()
    return _library


# The default steps, fastest first: the first that this library has and the device runs is used.
DEFAULT_FORWARD = ("19_hopper_pingpong_overlap", "11_tuned_forward")
DEFAULT_BACKWARD = ("16_deterministic_backward",)
DEFAULT_DECODE = ("22_split_kv_decode",)
DEFAULT_PAGED_DECODE = ("23_paged_kv_decode",)
KINDS = ("forward", "backward", "decode", "paged_decode")


def default_step(kind: str, cc: int = None) -> Step:
    """The default step for "forward", "backward", "decode" or "paged_decode" (KINDS): the first of
    DEFAULT_<KIND> that the library has and that runs on a GPU of compute capability `cc`
    (major*10 + minor; None: the current device's). FlashStepsError (NoDeviceError without a GPU)
    with each candidate's reason."""
    lib = library()
    defaults = {"forward": DEFAULT_FORWARD, "backward": DEFAULT_BACKWARD, "decode": DEFAULT_DECODE,
                "paged_decode": DEFAULT_PAGED_DECODE}
    if kind not in defaults:
        raise ValueError(f"no default step of kind {kind!r} (kinds: {', '.join(KINDS)})")
    names = defaults[kind]
    if cc is None:
        try:
            cc = lib.device()[0]
        except NoDeviceError as e:
            raise NoDeviceError(f"no {kind} step to choose: {e}", e.code) from None
    reasons = []
    for name in names:
        have = [s for s in lib.steps if s.name == name]
        if not have:
            reasons.append(f"{name} is not in this library (not built)")
        elif have[0].needs_cc not in (0, cc):
            n = have[0].needs_cc
            reasons.append(f"{name} needs compute capability {n // 10}.{n % 10}")
        else:
            return have[0]
    raise FlashStepsError(f"no {kind} step runs on compute capability {cc // 10}.{cc % 10}: " + "; ".join(reasons))
