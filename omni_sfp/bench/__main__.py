"""``python -m omni_sfp.bench``: the reference table on this machine, side by side with rl_games and skrl.

Timing (default): every row of the table trains the same work on the same env, interleaved over
repetitions, each run in a fresh process; prints the markdown table and writes JSON, markdown and a PNG
chart to ``--out``. ``--quality``: N seeds per configuration on learnable tasks, Welch's t-tests and learning
curves. Bad arguments print one line and exit with code 2. See docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import importlib.util
import json
import os
import shlex
import shutil
import sys
import tempfile
from pathlib import Path

from omni_sfp.bench.configs import PRESETS, ROWS, select_rows

EXIT_USAGE = 2
QUALITY_TASKS = "Cartpole,LQR60x8"  # learnable embedded tasks: balancing, and Ant-sized control with a known optimum


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors (no usage dump), as ``omni_sfp.train`` reports them."""

    name = "omni_sfp.bench"

    def error(self, message: str):
        print(f"{self.name}: error: {message}", file=sys.stderr)
        sys.exit(EXIT_USAGE)


def _units(text: str) -> tuple[int, ...]:
    try:
        units = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a comma-separated list of layer sizes, e.g. 256,128,64"
        ) from None
    return units


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive integer")
    return value


def build_parser() -> Parser:
    parser = Parser(prog="python -m omni_sfp.bench", description=__doc__.split("\n\n")[0])
    timing = parser.add_argument_group("timing (default mode)")
    timing.add_argument(
        "--preset",
        choices=[*PRESETS, "pixels"],
        default=None,
        help="cpu (default): big network sized for 2 CPU cores, under 10 minutes; reference: the "
        "reference table's sizes, for a GPU; cartpole: the default training run's small network "
        "on Cartpole (rollout SPS); quick: tiny, seconds; pixels: one PPO update of Isaac Lab's camera CNN "
        "on (6, 96, 96) images, row against row (omni_sfp/bench/pixels.py)",
    )
    timing.add_argument("--quick", action="store_true", help="the quick preset")
    timing.add_argument("--units", type=_units, help="trunk layer sizes, e.g. 256,128,64")
    timing.add_argument("--envs", type=_positive, help="number of environments")
    timing.add_argument("--horizon", type=_positive, help="env steps per env between updates")
    timing.add_argument("--updates", type=_positive, help="timed PPO updates per run")
    timing.add_argument("--warmup", type=_positive, help="untimed PPO updates before the timed ones, per run")
    timing.add_argument("--epochs", type=_positive, help="mini-epochs per update")
    timing.add_argument("--minibatch", type=_positive, help="minibatch size (must divide envs x horizon)")
    timing.add_argument("--episode-length", type=_positive, help="time limit of the env's episodes")
    timing.add_argument("--repetitions", type=_positive, help="interleaved runs per row (preset: 3)")
    timing.add_argument(
        "--rows", default="default", help=f"default, all, or comma-separated row ids: {', '.join(ROWS)}"
    )
    timing.add_argument(
        "--replay",
        type=_positive,
        metavar="K",
        help="record K steps of --task once and replay them in every run (env cost near zero)",
    )
    timing.add_argument("--task", help="with --replay: the task to record (any registered name; default ConstantCost)")
    timing.add_argument("--rlgames-compile", action="store_true", help="rl_games' torch_compile on (default off)")
    parser.add_argument("--threads", type=_positive, help="torch threads per run (default: the cores available)")
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    parser.add_argument("--seed", type=int, default=0, help="seed of every timed run (quality: the first seed)")
    parser.add_argument("--out", default="bench_results", help="folder for the JSON, markdown and PNG outputs")
    cold = parser.add_argument_group("cold start")
    cold.add_argument(
        "--cold-start",
        action="store_true",
        help="time `python -m omni_sfp.train` from the command to the end of its first iteration",
    )
    cold.add_argument(
        "--train-args",
        default="",
        metavar="OVERRIDES",
        help="with --cold-start or --env-overhead: the training overrides, e.g. 'task=LQR60x8 num_envs=256'",
    )
    cold.add_argument(
        "--env-overhead",
        action="store_true",
        help="the product's rollout rate against the bare env's step rate under random actions, on the task of "
        "--train-args (e.g. 'task=gym:Hopper-v5'), interleaved",
    )
    quality = parser.add_argument_group("quality")
    quality.add_argument("--quality", action="store_true", help="the quality evaluation instead of timing")
    quality.add_argument("--seeds", type=_positive, help="seeds per configuration (default 5)")
    quality.add_argument("--quality-tasks", default=QUALITY_TASKS, help="comma-separated tasks to train")
    quality.add_argument("--iterations", type=_positive, help="PPO updates per run (default: each task's config)")
    quality.add_argument(
        "--quality-configs",
        help="comma-separated rows (default all): sfp-fp32, double-fp32, sfp-mixed, double-mixed, rl_games, skrl",
    )
    quality.add_argument(
        "--jobs", type=_positive, help="runs trained at once, one process and torch thread each (default 1)"
    )
    quality.add_argument(
        "--suite",
        choices=["generic"],
        help="a suite of public and toy tasks trained with cfg/train/GenericPPO.yaml at fixed step budgets, against "
        "the RL Zoo's tuned PPO (docs/generic-defaults.md); --quality-tasks picks some of them",
    )
    quality.add_argument(
        "--quality-set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a training config override for every row, as for python -m omni_sfp.train (repeatable)",
    )
    return parser


def _device(name: str) -> str:
    import torch

    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda: CUDA is not available on this machine")
    return name


def _meta(device: str, threads: int, argv: list[str]) -> dict:
    import platform
    from importlib.metadata import PackageNotFoundError, version

    def installed(name: str) -> str | None:
        try:
            return version(name)
        except PackageNotFoundError:
            return None

    from omni_sfp.compute.cpu_choices import cpu_identity, simd_flags

    identity = cpu_identity()
    kind = ", ".join(
        f"{k.replace('_number', '')} {identity[k]}" for k in ("family", "model_number", "stepping") if k in identity
    )
    return {
        "date": datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"),
        "cpu": identity["model"] + (f" ({kind})" if kind else ""),
        "cpu_flags": simd_flags(identity),
        "cores": len(os.sched_getaffinity(0)),
        "device": device,
        "threads": threads,
        "python": platform.python_version(),
        "torch": installed("torch"),
        "skrl": installed("skrl"),
        "rl_games": installed("rl-games"),
        "command": shlex.join(["python", "-m", "omni_sfp.bench", *argv]),
    }


def _log(line: str) -> None:
    """Progress goes to stderr: stdout carries only the table."""
    print(line, file=sys.stderr, flush=True)


def _check_mode(parser: Parser, args: argparse.Namespace) -> None:
    timing_only = {
        "--replay": args.replay,
        "--task": args.task,
        "--rlgames-compile": args.rlgames_compile or None,
        "--rows": None if args.rows == "default" else args.rows,
        "--preset": args.preset,
        "--quick": args.quick or None,
        "--repetitions": args.repetitions,
        "--updates": args.updates,
        "--units": args.units,
        "--envs": args.envs,
        "--horizon": args.horizon,
        "--warmup": args.warmup,
        "--epochs": args.epochs,
        "--minibatch": args.minibatch,
        "--episode-length": args.episode_length,
    }
    quality_only = {
        "--seeds": args.seeds,
        "--iterations": args.iterations,
        "--quality-configs": args.quality_configs,
        "--jobs": args.jobs,
        "--quality-set": args.quality_set or None,
        "--suite": args.suite,
        "--quality-tasks": None if args.quality_tasks == QUALITY_TASKS else args.quality_tasks,
    }
    modes = [
        flag
        for flag, on in (
            ("--cold-start", args.cold_start),
            ("--env-overhead", args.env_overhead),
            ("--quality", args.quality),
        )
        if on
    ]
    if len(modes) > 1:
        parser.error(f"{' and '.join(modes)} are {'two' if len(modes) == 2 else 'three'} modes: choose one")
    if args.cold_start or args.env_overhead:
        misplaced = [
            flag
            for flag, value in {**timing_only, **quality_only}.items()
            if value is not None and flag != "--repetitions"
        ]
        if misplaced:
            parser.error(f"{', '.join(misplaced)} {'do' if len(misplaced) > 1 else 'does'} not apply with {modes[0]}")
        return
    if args.train_args:
        parser.error("--train-args applies only with --cold-start or --env-overhead")
    misplaced = [flag for flag, value in (timing_only if args.quality else quality_only).items() if value is not None]
    if misplaced:
        parser.error(
            f"{', '.join(misplaced)} {'do' if len(misplaced) > 1 else 'does'} not apply "
            f"{'with' if args.quality else 'without'} --quality"
        )
    if args.task is not None and args.replay is None:
        parser.error("--task needs --replay K: live timing runs on ConstantCost, whose work per step is fixed")
    if args.quick and args.preset not in (None, "quick"):
        parser.error(f"--quick contradicts --preset {args.preset}")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    args = parser.parse_args(argv)
    _check_mode(parser, args)
    try:
        device = _device(args.device)
    except ValueError as error:
        parser.error(str(error))
    threads = args.threads or len(os.sched_getaffinity(0))
    meta = _meta(device, threads, argv)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    out = Path(args.out)
    if args.cold_start:
        return _cold_start(args, threads, meta, out / f"coldstart-{stamp}", _log)
    if args.env_overhead:
        return _env_overhead(parser, args, threads, meta, out / f"envoverhead-{stamp}", _log)
    if args.quality:
        return _quality(parser, args, device, threads, meta, out / f"quality-{stamp}", _log)
    if args.preset == "pixels":
        from omni_sfp.bench import pixels

        return pixels.main(args, out, stamp, _log)
    return _timing(parser, args, device, threads, meta, out, stamp, _log)


def _timing(parser, args, device, threads, meta, out, stamp, log) -> int:
    from omni_sfp.bench import report as report_mod
    from omni_sfp.bench.timing import WorkerError, run_interleaved

    preset = "quick" if args.quick else args.preset or "cpu"
    base, default_repetitions = PRESETS[preset]
    work = base.replace(
        units=args.units,
        num_envs=args.envs,
        horizon=args.horizon,
        updates=args.updates,
        warmup_updates=args.warmup,
        epochs=args.epochs,
        minibatch_size=args.minibatch,
        episode_length=args.episode_length,
    )
    try:
        work.check()
        rows = select_rows(args.rows, preset)
    except ValueError as error:
        parser.error(str(error))
    if any(row.framework == "rlgames" for row in rows) and importlib.util.find_spec("rl_games") is None:
        parser.error(
            "rl_games is not installed: pip install 'omni-sfp[bench]' (rl-games==1.6.5, tensorboardX), "
            "or choose rows without it (--rows)"
        )
    repetitions = args.repetitions or default_repetitions

    recording, replay = None, None
    meta["env"] = (
        f"ConstantCost (fixed work per step), {work.episode_length}-step episodes with staggered starts"
        if work.task == "ConstantCost"
        else f"{work.task} (embedded), {work.episode_length}-step time limit"
    )
    if args.replay:
        from omni_sfp.bench.replay import record

        task = args.task or "ConstantCost"
        try:
            recording = record(task, steps=args.replay, num_envs=work.num_envs, device=device, seed=args.seed)
        except ValueError as error:  # an unknown task, or task keywords it does not take
            parser.error(str(error))
        meta["env"] = f"replay of {args.replay} recorded steps of {task} from {device} memory, staggered loop points"
    scratch = Path(tempfile.mkdtemp(prefix="omni_sfp_bench_"))
    if recording is not None:
        replay = str(scratch / "recording.pt")
        recording.save(replay)
    meta["load_before"] = os.getloadavg()[0]
    log(
        f"[bench] {preset} preset: {len(rows)} rows x {repetitions} repetitions, {threads} threads, {device}; "
        f"{meta['env']}"
    )
    try:
        runs = run_interleaved(
            rows,
            work,
            repetitions=repetitions,
            log=log,
            device=device,
            seed=args.seed,
            threads=threads,
            replay=replay,
            rlgames_compile=args.rlgames_compile,
            scratch=scratch,
        )
    except WorkerError as error:  # the scratch folder stays: it holds the failed run's log
        print(f"omni_sfp.bench: error: {error}", file=sys.stderr)
        return 1
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    meta["load_after"] = os.getloadavg()[0]
    shutil.rmtree(scratch)
    entries = report_mod.summarize(rows, runs, work)
    report = {
        "preset": preset,
        "meta": meta,
        "work": dataclasses.asdict(work),
        "repetitions": repetitions,
        "rows": entries,
        "targets": report_mod.targets(entries, work),
    }
    paths = report_mod.save(report, out / f"bench-{preset}-{stamp}")
    print(report_mod.markdown(report))
    log(f"[bench] wrote {', '.join(map(str, paths))}")
    return 0


def _write_summary(stem: Path, meta: dict, threads: int, summary: dict, table: str) -> int:
    """A one-table mode's outputs: ``<stem>.json`` (meta and summary) and ``<stem>.md``, also printed."""
    meta["load_after"] = os.getloadavg()[0]
    text = f"load average {meta['load_after']:.2f}; {meta['cpu']}, {threads} threads\n\n" + table
    stem.parent.mkdir(parents=True, exist_ok=True)
    stem.with_suffix(".json").write_text(json.dumps({"meta": meta, **summary}, indent=2))
    stem.with_suffix(".md").write_text(text)
    print(text)
    return 0


def _cold_start(args, threads, meta, stem: Path, log) -> int:
    from omni_sfp.bench.coldstart import markdown, measure_cold_start

    overrides = shlex.split(args.train_args)
    repetitions = args.repetitions or 3
    log(f"[bench] cold start: {repetitions} runs of python -m omni_sfp.train {' '.join(overrides)}")
    summary = measure_cold_start(overrides, repetitions=repetitions, threads=threads)
    return _write_summary(stem, meta, threads, summary, markdown(summary))


def _env_overhead(parser, args, threads, meta, stem: Path, log) -> int:
    import torch

    from omni_sfp.bench.envrate import markdown, measure_env_overhead
    from omni_sfp.run.compose import ConfigError, load_config

    torch.set_num_threads(threads)
    overrides = shlex.split(args.train_args)
    repetitions = args.repetitions or 3
    try:
        load_config(overrides)  # a bad task or key: one line, before any work
    except ConfigError as error:
        parser.error(str(error))
    log(f"[bench] env overhead: {repetitions} interleaved repetitions of {' '.join(overrides) or 'the default task'}")
    summary = measure_env_overhead(overrides, repetitions=repetitions, seed=args.seed)
    return _write_summary(stem, meta, threads, summary, markdown(summary))


def _quality(parser, args, device, threads, meta, stem: Path, log) -> int:
    import torch

    from omni_sfp.bench.quality import markdown, plot, run_quality, select_configs
    from omni_sfp.envs.registry import get_task

    torch.set_num_threads(threads)
    if args.suite:
        return _suite(parser, args, device, meta, stem.with_name(stem.name.replace("quality", "suite")), log)
    seeds = args.seeds or 5
    tasks = [t.strip() for t in args.quality_tasks.split(",") if t.strip()]
    try:
        for task in tasks or [args.quality_tasks]:
            get_task(task)
        configs = select_configs(args.quality_configs)
        if args.quality_set:
            from omni_sfp.run.compose import load_config

            load_config([f"task={tasks[0] if tasks else args.quality_tasks}", *args.quality_set])  # one clear line
    except ValueError as error:
        parser.error(str(error))
    runs_dir = Path(tempfile.mkdtemp(prefix="omni_sfp_quality_"))
    try:
        results = run_quality(
            tasks=tasks,
            seeds=range(args.seed, args.seed + seeds),
            device=device,
            runs_dir=runs_dir,
            iterations=args.iterations,
            log=log,
            configs=configs,
            overrides=args.quality_set,
            workers=args.jobs or 1,
        )
    finally:
        shutil.rmtree(runs_dir, ignore_errors=True)
    report = {"meta": meta, "seeds": seeds, "tasks": results}
    stem.parent.mkdir(parents=True, exist_ok=True)
    stem.with_suffix(".json").write_text(json.dumps(report, indent=2))
    text = markdown(report)
    stem.with_suffix(".md").write_text(text)
    plot(report, stem.with_suffix(".png"))
    print(text)
    log(f"[bench] wrote {stem}.json, {stem}.md, {stem}.png")
    return 0


def _suite(parser, args, device, meta, stem: Path, log) -> int:
    from omni_sfp.bench.quality import markdown_suite, run_suite, select_suite

    if args.quality_configs or args.iterations:
        parser.error(
            "--suite trains the generic settings at the suite's step budgets: drop --quality-configs/--iterations"
        )
    try:
        suite = select_suite(args.suite, None if args.quality_tasks == QUALITY_TASKS else args.quality_tasks)
        if args.quality_set:
            from omni_sfp.run.compose import load_config

            load_config([f"task={suite[0].task}", *args.quality_set])  # one clear line
    except ValueError as error:
        parser.error(str(error))
    seeds = args.seeds or 3
    runs_dir = Path(tempfile.mkdtemp(prefix="omni_sfp_suite_"))
    try:
        results = run_suite(
            suite=suite,
            seeds=range(args.seed, args.seed + seeds),
            device=device,
            runs_dir=runs_dir,
            log=log,
            overrides=args.quality_set,
            workers=args.jobs or 1,
        )
    finally:
        shutil.rmtree(runs_dir, ignore_errors=True)
    report = {"meta": meta, "seeds": seeds, "tasks": results}
    stem.parent.mkdir(parents=True, exist_ok=True)
    stem.with_suffix(".json").write_text(json.dumps(report, indent=2))
    text = markdown_suite(report)
    stem.with_suffix(".md").write_text(text)
    print(text)
    log(f"[bench] wrote {stem}.json, {stem}.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
