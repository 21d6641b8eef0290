"""One PPO update under ``torch.profiler``, eager and captured: per minibatch, the device's kernel time against the
update's wall time, the kernel launches and the aten calls. Where the wall time is much longer than the kernels,
the update waits on the host (Python, launches, host reads), which is what a captured step removes."""

from __future__ import annotations

import time
from typing import Any

import torch

from omni_sfp.bench.configs import ROWS, Work
from omni_sfp.bench.envs import make_bench_env
from omni_sfp.bench.omni import build_omni
from omni_sfp.ppo.loop import Learner

LAUNCHES = ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernelEx", "cudaGraphLaunch")


def profile_update(work: Work, *, device: str, mixed_precision: bool, captured: bool, seed: int = 0) -> dict[str, Any]:
    """Warm up (``work.warmup_updates + 1`` iterations: first calls, compiling, capturing), run one more rollout,
    then profile its update."""
    from skrl.utils import set_seed

    set_seed(seed)
    row = ROWS[f"omni-sfp-{'mixed' if mixed_precision else 'fp32'}{'-captured' if captured else ''}"]
    env = make_bench_env(work, device=device, seed=seed)
    agent, _ = build_omni(env, work, row, device=device, seed=seed)
    warm = work.warmup_updates + 1
    learner = Learner(env, agent, iterations=warm)
    learner.learn()
    cuda = agent.device.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    total = (warm + 1) * work.horizon
    learner.rollout(total)
    sync()
    activities = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if cuda else [])
    with torch.profiler.profile(activities=activities) as profile:
        start = time.perf_counter()
        losses = agent.update(timestep=learner.timestep + work.horizon - 1, timesteps=total)
        sync()
        wall = time.perf_counter() - start
    events = profile.key_averages()
    device_us = sum(getattr(e, "self_device_time_total", 0) for e in events)
    launches = sum(e.count for e in events if e.key in LAUNCHES)
    aten = sum(e.count for e in events if e.key.startswith("aten::"))
    minibatches = max(int(losses.get("minibatches", 0)), 1)
    return {
        "row": row.id,
        "capture": agent.capture,
        "update_s": wall,
        "minibatches": minibatches,
        "wall_ms_per_minibatch": 1e3 * wall / minibatches,
        "kernel_ms_per_minibatch": 1e-3 * device_us / minibatches if cuda else None,
        "launches_per_minibatch": launches / minibatches if cuda else None,
        "aten_calls_per_minibatch": aten / minibatches,
    }


def markdown(results: list[dict[str, Any]]) -> str:
    lines = [
        "| row | capture | update (s) | wall ms / minibatch | kernel ms / minibatch | launches / minibatch | aten calls / minibatch |",
        "|---|---|---|---|---|---|---|",
    ]

    def shown(value, digits=2):
        return "" if value is None else f"{value:.{digits}f}"

    for r in results:
        lines.append(
            f"| {r['row']} | {r['capture']} | {r['update_s']:.3f} | {shown(r['wall_ms_per_minibatch'])} | "
            f"{shown(r['kernel_ms_per_minibatch'])} | {shown(r['launches_per_minibatch'], 0)} | "
            f"{shown(r['aten_calls_per_minibatch'], 0)} |"
        )
    return "\n".join(lines)
