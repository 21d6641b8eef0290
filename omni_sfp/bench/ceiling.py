"""The machine's ceiling for this network: the matrix products of one PPO update, timed bare, and the FLOPs.

A row's ratio to the compute floor says how much framework overhead it carries; it cannot say how far the
floor itself is from what the hardware does. This module answers that: it times, in the run's precision,
every matrix product one update needs at the network's own shapes (each layer's forward at the rollout's
batch, and forward, input-gradient and weight-gradient at the minibatch's), as plain ``torch.mm`` on
contiguous operands, and takes the fastest of a few repetitions of each. Their sum is the update's time if
nothing but those products ran at the best rate this machine showed: the *GEMM ceiling*. The update's useful
FLOPs over that time is the achievable TFLOP/s; the same FLOPs over a row's time is the row's achieved
TFLOP/s.

Useful FLOPs count the work the compute floor does: the rollout's ``horizon + 1`` forwards over all envs and
``epochs x batch`` samples of forward and backward; 2 FLOPs per multiply-add of the GEMMs (trunk and both
heads), no input gradient for the first layer, elementwise work not counted. A row that does more (the
double pass's second trunk) is credited the same useful FLOPs, so its achieved TFLOP/s is lower.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from omni_sfp.bench.configs import Work

REPEATS = 3  # timed repetitions per product shape (after one untimed): the fastest counts


@dataclass(frozen=True)
class Product:
    """One matrix product shape, ``(m, k) @ (k, n)``, and how many times one update runs it."""

    m: int
    k: int
    n: int
    count: int

    @property
    def flops(self) -> int:
        return 2 * self.m * self.k * self.n * self.count


def layer_shapes(observation_size: int, action_size: int, units: tuple[int, ...]) -> list[tuple[int, int]]:
    """``(in, out)`` of every linear layer: the trunk, then the policy head and the value head."""
    sizes = [observation_size, *units]
    trunk = list(zip(sizes, sizes[1:]))
    return trunk + [(units[-1], action_size), (units[-1], 1)]


def update_products(work: Work, observation_size: int, action_size: int) -> list[Product]:
    """The matrix products of one PPO update's useful work (see the module docstring)."""
    layers = layer_shapes(observation_size, action_size, tuple(work.units))
    steps = work.epochs * work.mini_batches
    batch = work.minibatch_size
    products = []
    for index, (fan_in, fan_out) in enumerate(layers):
        products.append(Product(work.num_envs, fan_in, fan_out, work.horizon + 1))  # rollout forward
        products.append(Product(batch, fan_in, fan_out, steps))  # minibatch forward
        products.append(Product(fan_out, batch, fan_in, steps))  # weight gradient: g^T x
        if index:  # no input gradient for the observations
            products.append(Product(batch, fan_out, fan_in, steps))  # input gradient: g W
    return products


def update_flops(work: Work, observation_size: int, action_size: int) -> int:
    return sum(p.flops for p in update_products(work, observation_size, action_size))


def mixed_dtype(device_type: str) -> torch.dtype:
    """The dtype skrl's autocast computes the products in: bf16 on CPU, fp16 on CUDA."""
    return torch.bfloat16 if device_type == "cpu" else torch.float16


def _time_product(product: Product, dtype: torch.dtype, device: torch.device, sync) -> float:
    a = torch.randn(product.m, product.k, device=device).to(dtype)
    b = torch.randn(product.k, product.n, device=device).to(dtype)
    out = torch.empty(product.m, product.n, device=device, dtype=dtype)
    torch.mm(a, b, out=out)
    sync()
    best = float("inf")
    for _ in range(REPEATS):
        start = time.perf_counter()
        torch.mm(a, b, out=out)
        sync()
        best = min(best, time.perf_counter() - start)
    return best


def measure_ceiling(
    work: Work, observation_size: int, action_size: int, *, mixed_precision: bool, device: torch.device
) -> dict:
    """Seconds per update of the bare products at the best rate seen, and the TFLOP/s that gives."""
    dtype = mixed_dtype(device.type) if mixed_precision else torch.float32
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    products = update_products(work, observation_size, action_size)
    best: dict[tuple[int, int, int], float] = {}  # a shape met twice (a forward and a gradient) is timed once
    with torch.no_grad():
        for p in products:
            if (p.m, p.k, p.n) not in best:
                best[p.m, p.k, p.n] = _time_product(p, dtype, device, sync)
    seconds = sum(best[p.m, p.k, p.n] * p.count for p in products)
    flops = sum(p.flops for p in products)
    return {
        "update_s": seconds,
        "flops_per_update": flops,
        "tflops": flops / seconds / 1e12,
        "dtype": str(dtype).removeprefix("torch."),
    }
