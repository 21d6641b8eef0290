"""``python -m omni_sfp.bench <command>``: the benchmark's commands, each with only its own flags.

- ``table``: the timing table, every row on the same work in fresh, interleaved processes, against rl_games and
  skrl, with the compute floor and the GEMM ceiling (``--preset`` picks the work);
- ``quality``: N seeds per configuration on learnable tasks, Welch's t-tests, learning curves;
- ``pixels``: one PPO update of Isaac Lab's camera CNN, row against row;
- ``coldstart``: seconds from ``python -m omni_sfp.train`` to the end of its first iteration;
- ``env-overhead``: the product's rollout rate against the bare env's step rate;
- ``soak``: a long run sampling memory every iteration;
- ``gpu``: the prepared run for a lent GPU (``omni_sfp.bench.gpu``).

``python -m omni_sfp.bench <command> --help`` lists a command's flags. Bad arguments print one line and exit
with code 2. docs/benchmarks.md shows what each measures.
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

from omni_sfp.bench.cli import Parser, log, meta, positive, units
from omni_sfp.bench.configs import PRESETS, ROWS, preset_work, select_rows

QUALITY_TASKS = "Cartpole,LQR60x8"  # learnable embedded tasks: balancing, and Ant-sized control with a known optimum
COMMANDS = {
    "table": "the timing table against rl_games and skrl, with the compute floor and the GEMM ceiling",
    "quality": "seeds per configuration on learnable tasks: final returns, Welch's t-tests, learning curves",
    "pixels": "one PPO update of Isaac Lab's camera CNN on (6, 96, 96) images, row against row",
    "gpu": "the prepared GPU run (python -m omni_sfp.bench.gpu; its own flags)",
    "soak": "a long training run sampling memory every iteration, to show it stays flat",
    "coldstart": "seconds from `python -m omni_sfp.train` to the end of its first iteration",
    "env-overhead": "the product's rollout rate against the bare env's step rate (random actions), interleaved",
}


def _common(parser: argparse.ArgumentParser, *, device: bool = True, seed: bool = True) -> None:
    parser.add_argument("--threads", type=positive, help="torch threads per run (default: the cores available)")
    if device:
        parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    if seed:
        parser.add_argument("--seed", type=int, default=0, help="seed of every timed run (quality: the first seed)")
    parser.add_argument("--out", default="bench_results", help="folder for the JSON, markdown and PNG outputs")


def _train_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--train-args",
        default="",
        metavar="OVERRIDES",
        help="the training overrides, e.g. 'task=LQR60x8 num_envs=256'",
    )
    parser.add_argument("--repetitions", type=positive, default=3, help="runs (default 3)")


def build_parser() -> Parser:
    parser = Parser(
        prog="python -m omni_sfp.bench",
        description="The benchmark's commands, each with only its own flags: python -m omni_sfp.bench COMMAND "
        "--help lists them. docs/benchmarks.md shows what each measures.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", title="commands")

    table = commands.add_parser("table", help=COMMANDS["table"], description=COMMANDS["table"])
    work = table.add_mutually_exclusive_group()
    work.add_argument(
        "--preset",
        choices=list(PRESETS),
        default=None,
        help=f"the work every row trains (default cpu): {', '.join(PRESETS)} (docs/benchmarks.md says what each is)",
    )
    work.add_argument("--quick", action="store_true", help="the same as --preset quick")
    table.add_argument("--rows", default="default", help=f"default, all, or comma-separated row ids: {', '.join(ROWS)}")
    table.add_argument("--repetitions", type=positive, help="interleaved runs per row (default: the preset's)")
    table.add_argument("--updates", type=positive, help="timed PPO updates per run")
    table.add_argument("--units", type=units, help="trunk layer sizes, e.g. 256,128,64")
    table.add_argument("--envs", type=positive, help="number of environments")
    table.add_argument("--horizon", type=positive, help="env steps per env between updates")
    table.add_argument("--warmup", type=positive, help="untimed PPO updates before the timed ones, per run")
    table.add_argument("--epochs", type=positive, help="mini-epochs per update")
    table.add_argument("--minibatch", type=positive, help="minibatch size (must divide envs x horizon)")
    table.add_argument("--episode-length", type=positive, help="time limit of the env's episodes")
    table.add_argument(
        "--replay",
        type=positive,
        metavar="K",
        help="record K steps of --task once and replay them in every run (env cost near zero)",
    )
    table.add_argument("--task", help="with --replay: the task to record (any registered name; default ConstantCost)")
    table.add_argument("--rlgames-compile", action="store_true", help="rl_games' torch_compile on (default off)")
    _common(table)
    table.set_defaults(run=_table, parser=table)

    quality = commands.add_parser("quality", help=COMMANDS["quality"], description=COMMANDS["quality"])
    quality.add_argument("--seeds", type=positive, help="seeds per configuration (default 5; 3 with --suite)")
    quality.add_argument("--tasks", default=QUALITY_TASKS, help=f"comma-separated tasks (default {QUALITY_TASKS})")
    quality.add_argument("--iterations", type=positive, help="PPO updates per run (default: each task's config)")
    quality.add_argument(
        "--configs",
        help="comma-separated rows (default all but mlp-fp32): sfp-fp32, double-fp32, sfp-mixed, double-mixed, "
        "rl_games, skrl, mlp-fp32 (a recurrent task's network as an MLP of the same widths)",
    )
    quality.add_argument(
        "--jobs", type=positive, default=1, help="runs trained at once, one process and torch thread each"
    )
    quality.add_argument(
        "--suite",
        choices=["generic"],
        help="a suite of public and toy tasks trained with cfg/train/GenericPPO.yaml at fixed step budgets, against "
        "the RL Zoo's tuned PPO (docs/generic-defaults.md); --tasks picks some of them",
    )
    quality.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a training config override for every row, as for python -m omni_sfp.train (repeatable)",
    )
    _common(quality)
    quality.set_defaults(run=_quality, parser=quality)

    pixels = commands.add_parser("pixels", help=COMMANDS["pixels"], description=COMMANDS["pixels"])
    pixels.add_argument("--envs", type=positive, help="environments of the synthetic rollout (default 8)")
    pixels.add_argument("--horizon", type=positive, help="rollout steps per env (default 16)")
    pixels.add_argument("--epochs", type=positive, help="mini-epochs per update (default 4)")
    pixels.add_argument("--minibatch", type=positive, help="minibatch size (default 32; must divide envs x horizon)")
    pixels.add_argument("--repetitions", type=positive, default=3, help="interleaved updates per row (default 3)")
    _common(pixels, device=False, seed=False)
    pixels.set_defaults(run=_pixels, parser=pixels)

    gpu = commands.add_parser("gpu", help=COMMANDS["gpu"], add_help=False)
    gpu.add_argument("args", nargs=argparse.REMAINDER, help="python -m omni_sfp.bench.gpu's flags")

    from omni_sfp.bench import soak as soak_module

    soak = commands.add_parser("soak", help=COMMANDS["soak"], description=COMMANDS["soak"])
    soak_module.add_arguments(soak)
    soak.set_defaults(run=_soak, parser=soak)

    coldstart = commands.add_parser("coldstart", help=COMMANDS["coldstart"], description=COMMANDS["coldstart"])
    _train_args(coldstart)
    _common(coldstart, device=False, seed=False)
    coldstart.set_defaults(run=_cold_start, parser=coldstart)

    overhead = commands.add_parser("env-overhead", help=COMMANDS["env-overhead"], description=COMMANDS["env-overhead"])
    _train_args(overhead)
    _common(overhead, device=False)
    overhead.set_defaults(run=_env_overhead, parser=overhead)
    return parser


def _device(name: str) -> str:
    import torch

    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda: CUDA is not available on this machine")
    return name


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["gpu"]:  # its own parser, in its own module
        return _gpu(argv[1:])
    parser = build_parser()
    if argv and argv[0].startswith("-") and argv[0] not in ("-h", "--help"):  # the flags before the command
        flag = argv[0].partition("=")[0]
        command = {"--quality": "quality", "--cold-start": "coldstart", "--env-overhead": "env-overhead"}.get(flag)
        parser.error(
            f"{flag}: a command comes first ({', '.join(COMMANDS)}), then its flags: "
            + (f"python -m omni_sfp.bench {command} ..." if command else f"python -m omni_sfp.bench table {flag} ...")
        )
    args = parser.parse_args(argv)
    threads = args.threads or len(os.sched_getaffinity(0))
    device = "cpu"
    if hasattr(args, "device"):
        try:
            device = _device(args.device)
        except ValueError as error:
            args.parser.error(str(error))
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    return args.run(args, device=device, threads=threads, meta=meta(device, threads, argv), stamp=stamp)


def _gpu(argv: list[str]) -> int:
    """``python -m omni_sfp.bench gpu ...`` is ``python -m omni_sfp.bench.gpu ...``, imported only here."""
    try:
        from omni_sfp.bench import gpu
    except ModuleNotFoundError as error:
        if error.name != "omni_sfp.bench.gpu":
            raise
        Parser(prog="python -m omni_sfp.bench").error("gpu: this checkout has no omni_sfp/bench/gpu.py")
    return gpu.main(argv)


def _soak(args, *, threads, **_) -> int:
    from omni_sfp.bench import soak

    return soak.run_from_args(args, args.parser.error)


def _pixels(args, *, threads, stamp, **_) -> int:
    import torch

    from omni_sfp.bench import pixels

    torch.set_num_threads(threads)
    try:
        work = pixels.work_from(envs=args.envs, horizon=args.horizon, epochs=args.epochs, minibatch=args.minibatch)
    except ValueError as error:
        args.parser.error(str(error))
    return pixels.main(work, args.repetitions, Path(args.out), stamp, log)


def _table(args, *, device, threads, meta, stamp) -> int:
    from omni_sfp.bench import report as report_mod
    from omni_sfp.bench.timing import WorkerError, run_interleaved

    parser, out = args.parser, Path(args.out)
    if args.task is not None and args.replay is None:
        parser.error("--task needs --replay K: live timing runs on ConstantCost, whose work per step is fixed")
    preset = "quick" if args.quick else args.preset or "cpu"
    base, default_repetitions = preset_work(preset, device)
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


def _cold_start(args, *, threads, meta, stamp, **_) -> int:
    from omni_sfp.bench.coldstart import markdown, measure_cold_start

    stem = Path(args.out) / f"coldstart-{stamp}"
    overrides = shlex.split(args.train_args)
    repetitions = args.repetitions
    log(f"[bench] cold start: {repetitions} runs of python -m omni_sfp.train {' '.join(overrides)}")
    summary = measure_cold_start(overrides, repetitions=repetitions, threads=threads)
    return _write_summary(stem, meta, threads, summary, markdown(summary))


def _env_overhead(args, *, threads, meta, stamp, **_) -> int:
    import torch

    from omni_sfp.bench.envrate import markdown, measure_env_overhead
    from omni_sfp.run.compose import ConfigError, load_config

    torch.set_num_threads(threads)
    stem = Path(args.out) / f"envoverhead-{stamp}"
    overrides = shlex.split(args.train_args)
    repetitions = args.repetitions
    try:
        load_config(overrides)  # a bad task or key: one line, before any work
    except ConfigError as error:
        args.parser.error(str(error))
    log(f"[bench] env overhead: {repetitions} interleaved repetitions of {' '.join(overrides) or 'the default task'}")
    summary = measure_env_overhead(overrides, repetitions=repetitions, seed=args.seed)
    return _write_summary(stem, meta, threads, summary, markdown(summary))


def _quality(args, *, device, threads, meta, stamp) -> int:
    import torch

    from omni_sfp.bench.quality import markdown, plot, run_quality, select_configs
    from omni_sfp.envs.registry import get_task

    torch.set_num_threads(threads)
    stem = Path(args.out) / f"quality-{stamp}"
    if args.suite:
        return _suite(args, device, meta, stem.with_name(stem.name.replace("quality", "suite")))
    seeds = args.seeds or 5
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    try:
        for task in tasks or [args.tasks]:
            get_task(task)
        configs = select_configs(args.configs)
        if any(c.feed_forward for c in configs):
            from omni_sfp.bench.quality import feed_forward_overrides

            for task in tasks:
                feed_forward_overrides(task, args.overrides)  # a task without a recurrent network: one line
        peers = [c.key for c in configs if c.trainer != "omni-sfp"]
        if peers:
            from omni_sfp.run.compose import load_config

            for task in tasks:
                network = load_config([f"task={task}", *args.overrides]).train.models.network
                if network is not None and network.get("rnn") is not None:
                    raise ValueError(
                        f"quality rows {', '.join(peers)} train an MLP, and task {task!r} a recurrent network: "
                        "choose --configs from sfp-fp32, double-fp32, sfp-mixed, double-mixed, mlp-fp32"
                    )
        if args.overrides:
            from omni_sfp.run.compose import load_config

            load_config([f"task={tasks[0] if tasks else args.tasks}", *args.overrides])  # one clear line
    except ValueError as error:
        args.parser.error(str(error))
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
            overrides=args.overrides,
            workers=args.jobs,
        )
    finally:
        shutil.rmtree(runs_dir, ignore_errors=True)
    report = {"meta": meta, "seeds": seeds, "tasks": results}
    _write_report(stem, report, markdown(report))
    plot(report, stem.with_suffix(".png"))
    log(f"[bench] wrote {stem}.json, {stem}.md, {stem}.png")
    return 0


def _write_report(stem: Path, report: dict, text: str) -> None:
    """A seeded mode's outputs: ``<stem>.json`` (the whole report) and ``<stem>.md`` (its table), also printed."""
    stem.parent.mkdir(parents=True, exist_ok=True)
    stem.with_suffix(".json").write_text(json.dumps(report, indent=2))
    stem.with_suffix(".md").write_text(text)
    print(text)


def _suite(args, device, meta, stem: Path) -> int:
    from omni_sfp.bench.quality import markdown_suite, run_suite, select_suite

    if args.configs or args.iterations:
        args.parser.error(
            "--suite trains the generic settings at the suite's step budgets: drop --configs/--iterations"
        )
    try:
        suite = select_suite(args.suite, None if args.tasks == QUALITY_TASKS else args.tasks)
        if args.overrides:
            from omni_sfp.run.compose import load_config

            load_config([f"task={suite[0].task}", *args.overrides])  # one clear line
    except ValueError as error:
        args.parser.error(str(error))
    seeds = args.seeds or 3
    runs_dir = Path(tempfile.mkdtemp(prefix="omni_sfp_suite_"))
    try:
        results = run_suite(
            suite=suite,
            seeds=range(args.seed, args.seed + seeds),
            device=device,
            runs_dir=runs_dir,
            log=log,
            overrides=args.overrides,
            workers=args.jobs,
        )
    finally:
        shutil.rmtree(runs_dir, ignore_errors=True)
    report = {"meta": meta, "seeds": seeds, "tasks": results}
    _write_report(stem, report, markdown_suite(report))
    log(f"[bench] wrote {stem}.json, {stem}.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
