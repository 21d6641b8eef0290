"""The torch device a run uses, from the ``device`` setting (grammar: :func:`omni_sfp.config.schema.parse_device`)."""

from __future__ import annotations

import ctypes
import sys

import torch

from omni_sfp.compute import distributed
from omni_sfp.config.schema import parse_device


def resolve_device(name: str | torch.device) -> torch.device:
    """``auto``: CUDA when present, else CPU. Asking for CUDA without one is an error, not a fallback.

    In a multi-process run ``auto`` and ``cuda`` mean this process's GPU, ``cuda:LOCAL_RANK``.
    """
    kind, index = parse_device(str(name))
    if kind == "auto":
        kind = "cuda" if torch.cuda.is_available() else "cpu"
    if kind == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(f"device={str(name)!r}: CUDA is not available on this machine (use device=cpu or auto)")
    if kind == "cuda" and index is None and distributed.world_size() > 1:
        index = distributed.local_rank()
        if index >= torch.cuda.device_count():
            raise RuntimeError(
                f"device=cuda: this is process LOCAL_RANK={index} and the machine has "
                f"{torch.cuda.device_count()} GPU(s); start at most that many processes per node "
                "(torchrun --nproc_per_node) or pass device=cpu"
            )
    return torch.device(kind if index is None else f"{kind}:{index}")


def precision_note(device: torch.device, mixed_precision: bool) -> str:
    """What ``train.mixed_precision`` really does on this device, said plainly."""
    if not mixed_precision:
        return "fp32"
    if device.type == "cuda":
        return "mixed: fp16 autocast + GradScaler (CUDA)"
    return "mixed: bf16 autocast on CPU (GradScaler inactive for bf16; fast only on CPUs with bf16 instructions)"


# glibc's mallopt parameters (malloc.h); the values are glibc's own limits on 64-bit Linux
_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD = -1, -2, -3
_KEEP_FREED = ((_M_MMAP_THRESHOLD, 32 << 20), (_M_TRIM_THRESHOLD, 256 << 20), (_M_TOP_PAD, 64 << 20))
_malloc_tuned = False  # whether this process changed glibc's malloc parameters (its adaptive defaults are gone then)


def keep_freed_memory(device: torch.device) -> bool:
    """Let a CPU training process reuse the memory it frees, instead of returning it to the OS and faulting it
    back in page by page. Returns whether glibc took the settings (False elsewhere: CUDA, macOS, musl).

    Why: glibc serves blocks over its mmap threshold (128 KB at first, raised adaptively) with fresh mappings
    and trims freed memory at the top of the heap, so the activations and gradients of every minibatch (8 MB
    each for the default Cartpole's 8192 x 256) are faulted in again: 30k minor page faults per update of the
    default run, about 8% of its time. With blocks up to 32 MB (glibc's 64-bit maximum) taken from the heap
    and up to 256 MB of freed memory kept, an update faults ~150 times; the peak memory grows by ~4 MB.
    On a Zen 5 EPYC a training step of that network on 8192 rows took 20-21 ms against 28.5 (5,400 faults a
    step against under 100). Whether to call it is ``train.kernels.allocator`` (omni_sfp.compute.cpu_choices measures
    it once per CPU kind); once called it stays for the process (:func:`malloc_tuned`).
    """
    global _malloc_tuned
    if device.type != "cpu" or not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    taken = [mallopt(parameter, value) == 1 for parameter, value in _KEEP_FREED]
    _malloc_tuned = _malloc_tuned or any(taken)
    return all(taken)


def malloc_tuned() -> bool:
    """Whether :func:`keep_freed_memory` changed glibc's parameters in this process. glibc's own behaviour can
    no longer be measured here then: setting any of them turns its adaptive thresholds off for good."""
    return _malloc_tuned


def read_back(tensor: torch.Tensor) -> list:
    """A device tensor's values on the host, as a list: the one way the training loop reads a result back. The
    copy is explicit (a ``_to_copy`` to the CPU even for a CPU tensor, where ``tolist`` alone dispatches nothing),
    so a dispatch-mode counter sees every host read on any device (tests/test_host_reads.py)."""
    return tensor.to("cpu", copy=True).tolist()
