"""Multi-process training (``torchrun``): the process group, and skrl's view of it, set up in one place.

skrl 2.1.1 reads ``WORLD_SIZE``, ``RANK`` and ``LOCAL_RANK`` when it is *imported* and, with
``WORLD_SIZE > 1``, calls ``torch.distributed.init_process_group("nccl")`` and
``torch.cuda.set_device(LOCAL_RANK)`` itself: on a machine without CUDA/NCCL the import fails, and a
CPU run over gloo is impossible. :func:`setup` therefore runs first (``omni_sfp.train.main`` calls it
before anything imports skrl):

1. it creates the process group itself: ``gloo`` without CUDA, ``cpu:gloo,cuda:nccl`` with it (NCCL for
   CUDA tensors, gloo for the few CPU ones), after ``torch.cuda.set_device(LOCAL_RANK)``;
2. it imports skrl with ``WORLD_SIZE`` hidden (set to 1 for the duration of the import), so skrl's
   import-time setup does nothing;
3. it writes the real values into ``skrl.config.torch`` (``_is_distributed``, ``_rank``, ``_local_rank``,
   ``_world_size``, ``_device``), which is all skrl reads afterwards: PPO broadcasts the initial
   parameters from rank 0 and all-reduces gradients and the KL, ``set_seed`` adds the rank to the seed,
   and rank > 0 writes no TensorBoard files.

Rank 0 alone writes the run folder; every rank steps its own environments (seeded ``seed + rank``).
What skrl does not do, this package adds: :func:`pooled_moments` (used by
:class:`omni_sfp.ppo.scaler.DistributedRunningStandardScaler`) pools each batch's
statistics over the ranks so the observation and value normalisers stay identical (skrl's drift apart,
each rank normalising with its own data), and :func:`any_rank` / :func:`all_reduce_sum_` let the ranks
agree on decisions that change which collectives run next (stop, skip an update, raise).

Single-process runs never touch ``torch.distributed``: every helper is a no-op when ``WORLD_SIZE`` is 1.
"""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class DistributedInfo:
    """Where this process sits in a ``torchrun`` launch (all zeros and one outside one)."""

    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    backend: str | None = None

    @property
    def is_distributed(self) -> bool:
        return self.world_size > 1


def _environment() -> DistributedInfo:
    return DistributedInfo(
        rank=int(os.environ.get("RANK", "0")),
        local_rank=int(os.environ.get("LOCAL_RANK", "0")),
        world_size=int(os.environ.get("WORLD_SIZE", "1")),
    )


def backend_for_this_machine() -> str:
    """gloo for CPU tensors always; NCCL for CUDA tensors when this torch has both."""
    import torch.distributed as dist

    if torch.cuda.is_available() and dist.is_nccl_available():
        return "cpu:gloo,cuda:nccl"
    return "gloo"


def setup() -> DistributedInfo:
    """Create the process group (when launched with ``WORLD_SIZE > 1``) and make skrl's settings match.

    Call before anything imports skrl; safe to call again (a no-op once the group exists).
    """
    info = _environment()
    if not info.is_distributed:
        return info
    import torch.distributed as dist

    if not dist.is_initialized():
        backend = backend_for_this_machine()
        if torch.cuda.is_available() and info.local_rank < torch.cuda.device_count():
            torch.cuda.set_device(info.local_rank)  # before the group: NCCL binds to the current device
        dist.init_process_group(backend, rank=info.rank, world_size=info.world_size)
    info = DistributedInfo(info.rank, info.local_rank, info.world_size, str(dist.get_backend()))
    with _world_size_hidden():
        import skrl
    cfg = skrl.config.torch
    cfg._is_distributed = True
    cfg._rank, cfg._local_rank, cfg._world_size = info.rank, info.local_rank, info.world_size
    cfg._device = f"cuda:{info.local_rank}" if torch.cuda.is_available() else "cpu"
    return info


@contextmanager
def _world_size_hidden():
    """Import skrl with ``WORLD_SIZE=1`` so its import-time ``init_process_group("nccl")`` is skipped."""
    if "skrl" in sys.modules:  # imported already: its import-time setup has run (or had nothing to do)
        yield
        return
    saved = os.environ.get("WORLD_SIZE")
    os.environ["WORLD_SIZE"] = "1"
    try:
        yield
    finally:
        if saved is None:
            del os.environ["WORLD_SIZE"]
        else:
            os.environ["WORLD_SIZE"] = saved


def teardown() -> None:
    """Destroy the process group, if this process created one."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def world_size() -> int:
    import torch.distributed as dist

    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def rank() -> int:
    import torch.distributed as dist

    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def local_rank() -> int:
    return int(os.environ.get("LOCAL_RANK", "0")) if world_size() > 1 else 0


def all_reduce_sum_(tensor: torch.Tensor) -> torch.Tensor:
    """Sum ``tensor`` over the ranks, in place (a no-op in a single process)."""
    if world_size() > 1:
        import torch.distributed as dist

        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor


def any_rank(flag: bool, device: torch.device | str = "cpu") -> bool:
    """Whether ``flag`` is true on at least one rank (``flag`` itself in a single process)."""
    if world_size() == 1:
        return bool(flag)
    import torch.distributed as dist

    value = torch.tensor([int(bool(flag))], device=device)
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return bool(value.item())


def first_report(report: str | None, device: torch.device | str = "cpu") -> str | None:
    """The first rank's report (in rank order) when any rank has one, else None: every rank gets the same
    answer, so all of them take the same branch (skip, raise) and the next collectives still pair up.
    One small all-reduce; the reports themselves are exchanged only when there is one."""
    if not any_rank(report is not None, device):
        return None
    if world_size() == 1:
        return report
    import torch.distributed as dist

    reports: list[str | None] = [None] * world_size()
    dist.all_gather_object(reports, report)
    return next(r for r in reports if r is not None)


def gather_to_main(obj: Any) -> list[Any] | None:
    """``[obj of rank 0, obj of rank 1, ...]`` on rank 0, None elsewhere (``[obj]`` in a single process)."""
    if world_size() == 1:
        return [obj]
    import torch.distributed as dist

    gathered = [None] * world_size() if rank() == 0 else None
    dist.gather_object(obj, gathered, dst=0)
    return gathered


def pooled_moments(mean: torch.Tensor, var: torch.Tensor, count) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Mean, variance and count of one batch pooled over all ranks (float64; one all-reduce)."""
    mean, var = mean.double(), var.double()
    counts = torch.tensor([float(count)], dtype=torch.float64, device=mean.device)
    packed = all_reduce_sum_(torch.cat([(mean * counts).flatten(), ((var + mean.square()) * counts).flatten(), counts]))
    size = mean.numel()
    total = packed[-1]
    pooled_mean = packed[:size] / total
    pooled_var = packed[size : 2 * size] / total - pooled_mean.square()
    return pooled_mean.view_as(mean), pooled_var.view_as(var), total
