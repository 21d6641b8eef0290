"""Soak benchmark: a long training run that samples memory once per iteration, to show it stays flat.

``python -m omni_sfp.bench soak [--iterations 300] [--threads 1] [--every 1] [--out soak.json] [key=value ...]``

The run is the product's own path (validated config -> build_models -> build_agent -> loop.Learner; the
``key=value`` arguments are ``python -m omni_sfp.train`` overrides, default Cartpole with its default
network). At the end of every ``--every``-th iteration it records

- the process's resident memory (``VmRSS`` from ``/proc/self/status``; ``ru_maxrss``, the peak, where
  there is no ``/proc``),
- the torch tensors alive (found by ``gc``) and their bytes, and how many of them hold an autograd graph
  (``grad_fn`` set). A cache that kept graphs alive would make this grow; a constant 3 is skrl's
  ``GaussianMixin``, which keeps the last minibatch's ``Normal`` (its mean, scale and ``exp(log_std)``)
  until the next ``act()``, and
- whether the single-forward-pass cache holds an entry, and whether that entry carries a graph.

It prints a line per sample and a summary: the resident memory's least-squares slope over the iterations
after a warm-up (allocator pools and lazily built kernels settle during the first iterations), and writes
everything to ``--out`` as JSON. It is a benchmark, not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import gc
import json
import resource
import sys
import time
import warnings
from pathlib import Path
from typing import Any


def resident_mb() -> float:
    """Current resident set size in MB (VmRSS); the peak (ru_maxrss) where /proc is not available."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def live_tensors() -> tuple[int, float, int]:
    """Torch tensors alive (count, MB of their storage) and how many hold an autograd graph."""
    import torch

    count, nbytes, with_graph = 0, 0, 0
    with warnings.catch_warnings():  # isinstance() on deprecated torch module attributes warns
        warnings.simplefilter("ignore")
        for obj in gc.get_objects():
            try:
                if not isinstance(obj, torch.Tensor):
                    continue
            except ReferenceError:  # a dead weak proxy
                continue
            count += 1
            nbytes += obj.untyped_storage().nbytes() if obj.device.type != "meta" else 0
            with_graph += obj.grad_fn is not None
    return count, nbytes / 2**20, with_graph


def slope_per_100(points: list[tuple[int, float]]) -> float:
    """Least-squares slope of ``(iteration, value)`` points, per 100 iterations (0 for fewer than 2)."""
    if len(points) < 2:
        return 0.0
    n = len(points)
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    var_x = sum((x - mean_x) ** 2 for x, _ in points)
    if var_x == 0:
        return 0.0
    return 100 * sum((x - mean_x) * (y - mean_y) for x, y in points) / var_x


def run(overrides: list[str], *, iterations: int, every: int, threads: int, warmup: int) -> dict[str, Any]:
    import torch
    from omegaconf import OmegaConf
    from skrl.utils import set_seed

    from omni_sfp.compute.device import resolve_device
    from omni_sfp.config.values import num_envs
    from omni_sfp.envs.registry import make_env
    from omni_sfp.ppo.loop import Learner
    from omni_sfp.run.compose import load_config
    from omni_sfp.run.runner import build_agent, build_models
    from omni_sfp.sfp.cache import sfp_modules

    torch.set_num_threads(threads)
    cfg = load_config([*overrides, f"max_iterations={iterations}"])
    device = resolve_device(cfg.device)
    set_seed(cfg.seed)
    task_cfg = {k: v for k, v in OmegaConf.to_container(cfg.task.env, resolve=True).items() if k != "num_envs"}
    env = make_env(cfg.task.name, num_envs=num_envs(cfg), device=device, seed=cfg.seed, task_cfg=task_cfg)
    models = build_models(cfg, env, device)
    agent = build_agent(cfg, env, models, device, run_dir=None)
    caches = [cache for model in {id(m): m for m in models.values()}.values() for cache in sfp_modules(model)]
    samples: list[dict[str, Any]] = []
    start = time.perf_counter()
    print(
        f"[soak] {cfg.task.name} | {env.num_envs} envs | units {list(cfg.train.models.units)} | {iterations} "
        f"iterations | {threads} thread(s) | sampling every {every}",
        flush=True,
    )
    print(
        f"{'iteration':>9} {'rss MB':>8} {'tensors':>8} {'tensor MB':>9} {'with graph':>10} {'cache entry':>11} "
        f"{'return':>8}",
        flush=True,
    )

    def on_iteration(progress) -> None:
        if progress.iteration % every and progress.iteration != iterations:
            return
        gc.collect()
        count, megabytes, with_graph = live_tensors()
        entries = [cache._entry for cache in caches]
        entry = (
            "graph"
            if any(e is not None and e.carries_graph for e in entries)
            else "no graph"
            if any(e is not None for e in entries)
            else "empty"
        )
        sample = {
            "iteration": progress.iteration,
            "elapsed_s": time.perf_counter() - start,
            "rss_mb": resident_mb(),
            "tensors": count,
            "tensor_mb": megabytes,
            "tensors_with_graph": with_graph,
            "cache_entry": entry,
            "mean_return": progress.mean_return,
        }
        samples.append(sample)
        shown = "-" if progress.mean_return is None else f"{progress.mean_return:.1f}"
        print(
            f"{progress.iteration:>9} {sample['rss_mb']:>8.1f} {count:>8} {megabytes:>9.2f} {with_graph:>10} "
            f"{entry:>11} {shown:>8}",
            flush=True,
        )

    Learner(env, agent, iterations=iterations, log=lambda progress, losses: on_iteration(progress)).learn()

    settled = [s for s in samples if s["iteration"] > warmup] or samples
    rss = [(s["iteration"], s["rss_mb"]) for s in settled]
    summary = {
        "task": cfg.task.name,
        "num_envs": env.num_envs,
        "units": list(cfg.train.models.units),
        "iterations": iterations,
        "warmup_iterations": warmup,
        "threads": threads,
        "device": str(device),
        "torch": torch.__version__,
        "wall_s": time.perf_counter() - start,
        "rss_mb_first": samples[0]["rss_mb"],
        "rss_mb_after_warmup": settled[0]["rss_mb"],
        "rss_mb_last": samples[-1]["rss_mb"],
        "rss_mb_max": max(s["rss_mb"] for s in samples),
        "rss_slope_mb_per_100_iterations": slope_per_100(rss),
        "tensors_min_max_after_warmup": [min(s["tensors"] for s in settled), max(s["tensors"] for s in settled)],
        "tensors_with_graph_max": max(s["tensors_with_graph"] for s in samples),
        "cache_entries_with_graph": sum(s["cache_entry"] == "graph" for s in samples),
        "sfp_share_rate": agent.sfp_share_rate,
        "overrides": overrides,
    }
    return {"summary": summary, "samples": samples}


def _at_least(minimum: int):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = minimum - 1
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer >= {minimum}")
        return value

    return parse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The soak's flags (``python -m omni_sfp.bench soak``); argparse checks them."""
    parser.add_argument("--iterations", type=_at_least(1), default=300, help="PPO iterations to run (default 300)")
    parser.add_argument("--every", type=_at_least(1), default=1, help="sample every N iterations (default 1)")
    parser.add_argument("--warmup", type=_at_least(0), default=20, help="iterations left out of the slope (default 20)")
    parser.add_argument("--threads", type=_at_least(1), default=1, help="torch CPU threads (default 1)")
    parser.add_argument("--out", type=Path, default=Path("soak.json"), help="JSON output (default soak.json)")
    parser.add_argument("overrides", nargs="*", help="python -m omni_sfp.train overrides, e.g. task=LQR60x8")


def run_from_args(args: argparse.Namespace, error) -> int:
    """The soak of parsed arguments; ``error(message)`` reports a bad config in one line (exit 2)."""
    from omni_sfp.run.compose import ConfigError

    try:
        result = run(
            args.overrides, iterations=args.iterations, every=args.every, threads=args.threads, warmup=args.warmup
        )
    except ConfigError as problem:
        return error(str(problem))
    s = result["summary"]
    print(
        f"[soak] RSS {s['rss_mb_first']:.1f} MB at iteration {result['samples'][0]['iteration']}, "
        f"{s['rss_mb_after_warmup']:.1f} MB after the {s['warmup_iterations']}-iteration warm-up, "
        f"{s['rss_mb_last']:.1f} MB at the end (max {s['rss_mb_max']:.1f}); slope after warm-up "
        f"{s['rss_slope_mb_per_100_iterations']:+.3f} MB per 100 iterations | live tensors "
        f"{s['tensors_min_max_after_warmup'][0]}-{s['tensors_min_max_after_warmup'][1]}, with a graph at most "
        f"{s['tensors_with_graph_max']} | cache entries holding a graph at an iteration end: "
        f"{s['cache_entries_with_graph']} | {s['wall_s']:.0f} s",
        flush=True,
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    print(f"[soak] wrote {args.out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m omni_sfp.bench soak ...``; this module's own ``python -m`` takes the same flags."""
    from omni_sfp.bench.cli import Parser

    parser = Parser(prog="python -m omni_sfp.bench soak", description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    return run_from_args(args, parser.error)


if __name__ == "__main__":
    sys.exit(main())
