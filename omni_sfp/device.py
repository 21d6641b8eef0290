"""The torch device a run uses, from the ``device`` setting (grammar: :func:`omni_sfp.schema.parse_device`)."""

from __future__ import annotations

import torch

from omni_sfp import distributed
from omni_sfp.schema import parse_device


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
