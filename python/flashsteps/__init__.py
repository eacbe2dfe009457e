"""flashsteps: the series' attention kernels (libfa_steps.so, capi/) from Python and PyTorch.

Without PyTorch: ``library()`` (the C ABI through ctypes: the steps, their rules, the device) and
``python -m flashsteps info``. With PyTorch (>= 2.4): ``attention`` and ``decode`` (flashsteps.ops; decode
over a contiguous KV cache, or a paged one with ``block_table=``), custom ops with autograd, imported on first
use so that this package imports without torch.
"""
from ._lib import (
    FlashStepsError,
    LibraryNotFound,
    NoDeviceError,
    Step,
    UsageError,
    WrongDeviceError,
    default_step,
    library,
)

__all__ = [
    "attention",
    "decode",
    "library",
    "default_step",
    "Step",
    "FlashStepsError",
    "LibraryNotFound",
    "NoDeviceError",
    "UsageError",
    "WrongDeviceError",
]


def __getattr__(name):
    if name in ("attention", "decode", "ops"):
        import importlib

        ops = importlib.import_module(__name__ + ".ops")  # imports torch: ImportError without it
        return ops if name == "ops" else getattr(ops, name)
    raise AttributeError(f"module 'flashsteps' has no attribute {name!r}")
