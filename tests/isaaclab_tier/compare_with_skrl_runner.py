"""Our CLI vs skrl's own ``Runner`` on a real Isaac Lab 3 task, with the same registered skrl config, env steps and
seeds: mean training return (last iterations) and SPS of each, the two sides taking turns to run first. Not a test
(it takes minutes); docs/benchmarks.md quotes its output. Run it in the Isaac Lab tier's venv, from the repository root:

    OMNI_SFP_ISAACLAB_TIER=1 <venv>/bin/python tests/isaaclab_tier/compare_with_skrl_runner.py \\
        --num-envs 64 --iterations 50 --seeds 1 2 [--task Isaac-Cartpole-Camera-Direct --rollouts 32] [--repeats 3]
        [--task IsaacContrib-Cartpole-Showcase-Direct --presets dict_box]

Both sides: ``--task`` (default ``Isaac-Cartpole-Direct``) from its registered env config (Newton, CPU; cameras
enabled for a camera task, as Isaac Lab's scripts' ``--enable_cameras``) with ``num_envs`` envs and
``seed``; the agent from its registered ``skrl_cfg_entry_point`` (ours through omni_sfp.envs.upstream, skrl's as is)
for ``iterations * agent.rollouts`` env steps (``--rollouts`` overrides the registered rollouts on both sides, to fit
a slow task's iterations on 2 cores). Mean return: the mean undiscounted return of the episodes that
finished in each iteration, averaged over the last ``--last`` iterations (omni_sfp's progress file for ours; the
same bookkeeping around the env for skrl's). SPS: env steps over the training loop's wall time. ``--presets NAME``:
Isaac Lab's ``presets=NAME`` on both sides (ours on the CLI; skrl's through ``resolve_task_config``, as Isaac Lab's
skrl train script resolves it), which selects the env config and the member of a skrl config family.

``--repeats N`` runs each seed's pair N times, the side that goes first alternating from pair to pair, and reports
each seed's median SPS: a 2-3% difference between the sides is within one pair's spread on 2 cores, and the runs
are deterministic, so the returns repeat exactly and only the clock varies.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
TASK = "Isaac-Cartpole-Direct"


def assets() -> None:
    sys.path.insert(0, str(HERE))
    import standin_assets

    root = Path(os.environ.get("OMNI_SFP_ISAACLAB_ASSETS") or Path(tempfile.gettempdir()) / "omni-sfp-isaaclab-assets")
    os.environ["ISAACSIM_ASSET_ROOT"] = str(standin_assets.make(root))


def ours(
    task: str, seed: int, num_envs: int, iterations: int, rollouts: int | None, workdir: Path, presets: str | None
) -> dict:
    progress = workdir / f"ours-{seed}.jsonl"
    command = [
        sys.executable,
        "-m",
        "omni_sfp.train",
        f"task={task}",
        "device=cpu",
        f"num_envs={num_envs}",
        f"max_iterations={iterations}",
        f"seed={seed}",
        f"runs_dir={workdir / 'runs'}",
        f"progress_file={progress}",
    ] + ([f"train.ppo.rollouts={rollouts}"] if rollouts else [])
    command += [f"presets={presets}"] if presets else []
    result = subprocess.run(command, check=False, capture_output=True, text=True, env=os.environ.copy())
    if result.returncode:
        raise SystemExit(f"our CLI failed ({result.returncode}): {result.stderr[-3000:]}")
    summary = re.search(r"Training time: ([\d.]+) s \| SPS: (\d+) \| SFP cache hits: ([\d.]+%|off)", result.stdout)
    lines = [json.loads(line) for line in progress.read_text().splitlines()]
    returns = [line["mean_return"] for line in lines if "iteration" in line]  # not the end's line
    return {
        "returns": returns,
        "sps": float(summary.group(2)),
        "time_s": float(summary.group(1)),
        "cache_hits": summary.group(3),
        "command": " ".join(command[1:]),
    }


def skrl_runner(
    task: str, seed: int, num_envs: int, iterations: int, rollouts: int | None, presets: str | None
) -> dict:
    """skrl's Runner as Isaac Lab's skrl train entry point drives it (registered config, seed, timesteps)."""
    import gymnasium
    import isaaclab_tasks  # noqa: F401
    import torch
    from isaaclab.app import launch_simulation
    from isaaclab_tasks.utils.hydra import resolve_task_config
    from skrl.envs.wrappers.torch import wrap_env
    from skrl.utils.runner.torch import Runner

    from omni_sfp.envs.isaaclab import launcher_args

    env_cfg, agent_cfg = resolve_task_config(
        task, "skrl_cfg_entry_point", overrides=[f"presets={presets}"] * bool(presets)
    )
    if rollouts:
        agent_cfg["agent"]["rollouts"] = rollouts
    rollouts = agent_cfg["agent"]["rollouts"]
    agent_cfg["seed"] = seed
    agent_cfg["trainer"]["timesteps"] = iterations * rollouts
    agent_cfg["trainer"]["close_environment_at_exit"] = False
    agent_cfg["trainer"]["disable_progressbar"] = True
    env_cfg.sim.device, env_cfg.scene.num_envs = "cpu", num_envs  # what parse_env_cfg sets
    env_cfg.seed = seed
    launch = launcher_args(env_cfg, headless=True, device="cpu", launch={})  # as ours: cameras for a camera task
    with launch_simulation(env_cfg, launch):
        env = wrap_env(gymnasium.make(task, cfg=env_cfg), wrapper="isaaclab")
        returns, episode, finished, steps = [], torch.zeros(num_envs, 1), [0.0, 0], [0]
        step = env.step

        def recording_step(actions):
            obs, reward, terminated, truncated, info = step(actions)
            episode.add_(reward)
            done = terminated | truncated
            finished[0] += float(episode[done].sum())
            finished[1] += int(done.sum())
            episode[done] = 0.0
            steps[0] += 1
            if steps[0] % rollouts == 0:
                returns.append(finished[0] / finished[1] if finished[1] else None)
                finished[:] = [0.0, 0]
            return obs, reward, terminated, truncated, info

        env.step = recording_step
        runner = Runner(env, agent_cfg)
        start = time.perf_counter()
        runner.run()
        elapsed = time.perf_counter() - start
        env.close()
    return {"returns": returns, "sps": iterations * rollouts * num_envs / elapsed, "time_s": elapsed}


def mean_last(returns: list, last: int) -> float:
    values = [r for r in returns[-last:] if r is not None]
    return statistics.fmean(values) if values else float("nan")


def median_sps(runs: list[dict]) -> dict:
    """One side's runs of one seed as one: the first run's record (the returns repeat exactly) with the median SPS."""
    return {**runs[0], "sps": statistics.median(run["sps"] for run in runs), "all_sps": [run["sps"] for run in runs]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--task", default=TASK)
    parser.add_argument("--rollouts", type=int, default=None, help="env steps per iteration (default: registered)")
    parser.add_argument("--presets", default=None, help="Isaac Lab's presets=NAME[,NAME] on both sides")
    parser.add_argument("--num-envs", type=int, default=64)
    parser.add_argument("--iterations", type=int, default=50)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--last", type=int, default=10, help="iterations averaged for the mean return")
    parser.add_argument("--repeats", type=int, default=1, help="pairs of runs per seed (median SPS of each side)")
    parser.add_argument("--out", type=Path, default=None, help="also write every per-iteration return here (JSON)")
    parser.add_argument("--skrl-only", type=int, default=None, help=argparse.SUPPRESS)  # one skrl run, in-process
    args = parser.parse_args()
    assets()
    if args.skrl_only is not None:
        print(
            json.dumps(
                skrl_runner(args.task, args.skrl_only, args.num_envs, args.iterations, args.rollouts, args.presets)
            )
        )
        return
    rows = []
    with tempfile.TemporaryDirectory() as workdir:
        for index, seed in enumerate(args.seeds):
            command = [
                sys.executable,
                str(Path(__file__).resolve()),
                "--skrl-only",
                str(seed),
                "--num-envs",
                str(args.num_envs),
                "--iterations",
                str(args.iterations),
                "--task",
                args.task,
            ] + (["--rollouts", str(args.rollouts)] if args.rollouts else [])
            command += ["--presets", args.presets] if args.presets else []

            def run_ours(seed=seed):
                return ours(args.task, seed, args.num_envs, args.iterations, args.rollouts, Path(workdir), args.presets)

            def run_theirs(command=command):
                child = subprocess.run(
                    command, capture_output=True, text=True, check=False, cwd=workdir, env=os.environ.copy()
                )  # cwd: skrl logs to ./<experiment directory>
                if child.returncode:
                    raise SystemExit(f"skrl's Runner failed: {child.stderr[-3000:]}")
                return json.loads(child.stdout.strip().splitlines()[-1])

            pairs = []
            for repeat in range(max(1, args.repeats)):
                if (index + repeat) % 2 == 0:  # A B, then B A: a drift in the machine's speed falls on both sides
                    pairs.append((run_ours(), run_theirs()))
                else:
                    skrl_first = run_theirs()
                    pairs.append((run_ours(), skrl_first))
            mine, theirs = (median_sps([pair[side] for pair in pairs]) for side in (0, 1))
            rows.append((seed, mine, theirs))
            listed = ", ".join(f"{a['sps']:.0f}/{b['sps']:.0f}" for a, b in pairs)
            each = f" (ours/skrl's, pair by pair: {listed})" if len(pairs) > 1 else ""
            print(
                f"seed {seed}: omni_sfp mean return {mean_last(mine['returns'], args.last):.2f}, "
                f"SPS {mine['sps']:.0f}, SFP cache hits {mine['cache_hits']} | skrl Runner mean return "
                f"{mean_last(theirs['returns'], args.last):.2f}, SPS {theirs['sps']:.0f}{each}",
                flush=True,
            )
    if args.out is not None:
        runs = [{"seed": seed, "omni_sfp": mine, "skrl": theirs} for seed, mine, theirs in rows]
        args.out.write_text(json.dumps(runs))
    rollouts = f", {args.rollouts} rollouts" if args.rollouts else ""
    repeats = f", median SPS of {args.repeats} pairs a seed" if args.repeats > 1 else ""
    print(
        f"{args.task}{f' presets={args.presets}' if args.presets else ''}, {args.num_envs} envs{rollouts}, "
        f"{args.iterations} iterations{repeats}, "
        f"mean return over the last {args.last}:"
    )
    for name, index in (("omni_sfp", 1), ("skrl Runner", 2)):
        means = [mean_last(row[index]["returns"], args.last) for row in rows]
        sps = [row[index]["sps"] for row in rows]
        per_seed = ", ".join(f"{m:.2f}" for m in means)
        print(
            f"  {name:12s} mean return {statistics.fmean(means):8.2f} (per seed {per_seed})"
            f" | SPS {statistics.fmean(sps):6.0f} (per seed {', '.join(f'{s:.0f}' for s in sps)})"
        )


if __name__ == "__main__":
    main()
