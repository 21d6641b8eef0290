"""``python -m omni_sfp.train [key=value ...]``: train (or, with test=true, play) PPO on a registered task.

OmniIsaacGymEnvs-style overrides, e.g. ``task=LQR60x8 num_envs=256 headless=True seed=1
max_iterations=200 train.mixed_precision=true``. Inside Isaac Sim (``python.sh -m omni_sfp.train task=Ant``)
Isaac tasks start the simulation app themselves before anything else from Omniverse is imported.
Multi-process: ``torchrun --nproc_per_node=N -m omni_sfp.train ...`` (docs/reliability.md).

As in a Hydra app: ``--cfg job`` prints the composed, validated config as YAML and builds nothing
(``--resolve`` resolves its interpolations first). ``-m`` (``--multirun``) sweeps: ``-m seed=0,1,2
train.sfp.enabled=true,false`` is 6 jobs (every combination, the first key varying slowest). Every job's config
is checked before the first starts; then they run one after another, each into its own run folder, and a table
sums them up. Its exit code is the first failed job's, or that of the job a SIGINT / SIGTERM stopped (the later
jobs are not started).

``seed=-1`` draws a random seed (OmniIsaacGymEnvs and Isaac Lab): it is printed and saved in the run
folder's config.yaml, so the run reproduces with ``seed=<that seed>``.

Exit codes: 0 done; 2 bad input (config, task, checkpoint, a CUDA device this machine lacks), one line naming
the problem; 1 training failed (non-finite data with train.check_finite=raise), one line; 130 / 143 stopped by SIGINT / SIGTERM
after saving a checkpoint (128 + the signal number, the shell's convention: an interrupted run is not a
finished one, so `train && next` stops there).
"""

from __future__ import annotations

import os
import secrets
import signal
import sys
from dataclasses import dataclass

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2


def _error(message: object) -> None:
    print(f"omni_sfp.train: error: {message}", file=sys.stderr, flush=True)


def draw_seed(cfg) -> int | None:
    """``seed=-1``: replace it in ``cfg`` by a random seed (the same on every rank) and print it; returns it."""
    from omni_sfp.compute import distributed
    from omni_sfp.config import schema

    if cfg.seed != schema.RANDOM_SEED:
        return None
    box = [secrets.randbelow(schema.SEED_MAX + 1)]
    if distributed.world_size() > 1:
        import torch.distributed as dist

        dist.broadcast_object_list(box, src=0)  # one seed for the run: the ranks add their rank to it
    cfg.seed = box[0]
    if distributed.rank() == 0:
        print(
            f"[omni_sfp] seed=-1: drew seed {cfg.seed} (saved in the run folder's config.yaml; pass seed={cfg.seed} "
            "to repeat the run)",
            flush=True,
        )
    return cfg.seed


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if any(arg in ("-h", "--help") for arg in argv):
        _print_help(argv)
        return EXIT_OK
    try:
        flags, overrides = _parse_flags(argv)
    except _UsageError as error:
        _error(error)
        return EXIT_USAGE
    from omni_sfp.config.values import quote_preset_lists

    overrides = quote_preset_lists(overrides)  # presets=a,b: Isaac Lab's list, not a sweep
    if flags.cfg is not None:
        return _show_config(overrides, flags.cfg, resolve=flags.resolve)
    if flags.multirun and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        _error(
            "-m (--multirun) runs its jobs one after another in one process, and under torchrun every process "
            "would run the whole sweep: start one torchrun per job instead (or drop torchrun for the sweep)"
        )
        return EXIT_USAGE
    from omni_sfp.compute import distributed

    distributed.setup()  # before anything imports skrl (see omni_sfp/compute/distributed.py)
    try:
        return _multirun(overrides) if flags.multirun else _job(overrides).code
    finally:
        distributed.teardown()


class _UsageError(ValueError):
    """A command-line flag this command does not take, or takes otherwise."""


@dataclass
class _Flags:
    cfg: str | None = None  # --cfg job|all|hydra
    resolve: bool = False
    multirun: bool = False


CFG_CHOICES = ("job", "all", "hydra")


def _parse_flags(argv: list[str]) -> tuple[_Flags, list[str]]:
    """Hydra's flags this command takes (``-m``, ``--cfg``, ``--resolve``), and the overrides (the rest, in order)."""
    flags, overrides = _Flags(), []
    args = iter(argv)
    for arg in args:
        if arg in ("-m", "--multirun"):
            flags.multirun = True
        elif arg == "--resolve":
            flags.resolve = True
        elif arg in ("-c", "--cfg") or arg.startswith("--cfg="):
            value = arg.partition("=")[2] if "=" in arg else next(args, None)
            if value not in CFG_CHOICES:
                got = "nothing" if value is None else repr(value)
                raise _UsageError(f"--cfg takes job (the composed config; all is the same here), got {got}")
            flags.cfg = value
        elif arg.startswith("-"):
            raise _UsageError(
                f"unknown option {arg!r}: this command takes key=value overrides, -m/--multirun, "
                "--cfg job [--resolve] and -h/--help"
            )
        else:
            overrides.append(arg)
    if flags.resolve and flags.cfg is None:
        raise _UsageError("--resolve goes with --cfg job (print the config with its interpolations resolved)")
    if flags.cfg is not None and flags.multirun:
        raise _UsageError("--cfg and -m (--multirun): one at a time, as in Hydra; -m checks every job's config first")
    return flags, overrides


def _print_help(argv: list[str] | None = None) -> None:
    """The usage (this module's docstring) and Hydra's help sections: config groups, tasks, flags, Isaac Lab's
    selector tokens (with ``task=<Isaac Lab id>``: that task's names, as Isaac Lab's ``--task X --help``). No torch
    unless an Isaac Lab task is named."""
    from omni_sfp.envs.registry import list_tasks
    from omni_sfp.run.sweep import GROUPS, group_options

    print(__doc__.strip())
    print("\n== Config groups ==\nCompose your configuration from these groups (group=option)\n")
    for group in GROUPS:
        print(f"{group}: {', '.join(group_options(group))}")
    print("\n== Tasks ==\nThe registered tasks (task=<name>)\n")
    print(", ".join(list_tasks()))
    print("gym:<Id> (any Gymnasium id, e.g. gym:Pendulum-v1); gym:<module>:<Id> (the module registers the id)")
    print(
        "\n== Flags ==\n"
        "--cfg job [--resolve]  print the composed, validated config as YAML and exit, building nothing\n"
        "                       (--resolve: interpolations resolved first; -c job and --cfg all are the same)\n"
        "-m, --multirun         one job per combination of the sweeps (seed=0,1,2, range(0,3), choice(a,b),\n"
        "                       glob(*) for a group), one after another, then a summary table\n"
        "-h, --help             this help"
    )
    print(
        "\n== Isaac Lab presets ==\nIsaac Lab tasks take Isaac Lab's own selector tokens, applied as its "
        "parse_env_cfg(overrides=...) applies them\n"
        "presets=NAME[,NAME]    the task's named config alternatives; where the task registers a skrl config "
        "family,\n                       also its network and agent settings\n"
        "physics=NAME           the physics backend preset (the default outside Kit: Newton)\n"
        "renderer=NAME          the camera renderer preset"
    )
    task = next((arg.partition("=")[2] for arg in reversed(argv or []) if arg.startswith("task=")), None)
    print(_task_presets(task) if task else "Add task=<Isaac Lab id> to --help for that task's names.")
    print("\nEvery key, its default, range and meaning: omni_sfp/config/schema.py (the README's Configuration table).")
    print("Every task, its sizes and config source: python -m omni_sfp.list_tasks")


def _task_presets(task: str) -> str:
    """One line per selector with the names task ``task`` declares (env config and skrl config family)."""
    from omni_sfp.envs import isaaclab

    if not isaaclab.is_isaaclab_id(task):
        return f"task {task}: not an Isaac Lab task; the selector tokens do not apply"
    if not isaaclab.kitless():
        return f"task {task}: its names are read from Isaac Lab 3 (import isaaclab_tasks), which is not installed here"
    try:
        isaaclab.check_id(task)
        names = isaaclab.preset_names(task, "skrl_cfg_entry_point")
    except (ValueError, RuntimeError) as error:
        return f"task {task}: {error}"
    return "\n".join(f"task {task}: {key}= {', '.join(found) or '(none)'}" for key, found in names.items())


def _bad_input() -> tuple[type[Exception], ...]:
    """Bad input: the config, the checkpoint, or a task this machine cannot build (its simulator is missing).
    Not any RuntimeError: a CUDA out-of-memory or a bug is no bad input and keeps its traceback."""
    from omni_sfp.envs.isaaclab import IsaacLabError
    from omni_sfp.envs.oige import OIGEError
    from omni_sfp.envs.registry import MissingDependencyError, UnknownTaskError
    from omni_sfp.run.checkpoint import CheckpointError
    from omni_sfp.run.compose import ConfigError
    from omni_sfp.run.outputs.base import OutputError

    return ConfigError, CheckpointError, OutputError, UnknownTaskError, MissingDependencyError, IsaacLabError, OIGEError


def _load_checked(overrides: list[str]):
    """The composed, validated config, its outputs' settings checked too (what the runner checks first)."""
    from omni_sfp.run.compose import load_config
    from omni_sfp.run.outputs.base import check_config

    cfg = load_config(overrides)
    check_config(cfg)
    return cfg


def _show_config(overrides: list[str], which: str, *, resolve: bool) -> int:
    """``--cfg job``: the composed and validated config as YAML; builds nothing."""
    if which == "hydra":
        _error(
            "--cfg hydra: this app composes cfg/ with Hydra's compose API and has no Hydra runtime config (no "
            "output folder, no working-directory change); use --cfg job"
        )
        return EXIT_USAGE
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from omni_sfp.run.sweep import refuse_sweeps

    try:
        refuse_sweeps(overrides)
        text = OmegaConf.to_yaml(_load_checked(overrides), resolve=resolve)
    except (*_bad_input(), OmegaConfBaseException) as error:
        _error(" ".join(str(error).split()))
        return EXIT_USAGE
    print(text, end="", flush=True)
    return EXIT_OK


def _multirun(overrides: list[str]) -> int:
    """``-m``: every job's config is validated before the first starts; then the jobs run one after another in
    this process (Hydra's basic launcher), each as a single run with its own run folder, and a table sums up."""
    from omni_sfp.run.compose import ConfigError
    from omni_sfp.run.sweep import expand, table

    try:
        jobs = expand(overrides)
    except ConfigError as error:
        _error(error)
        return EXIT_USAGE
    for number, job in enumerate(jobs, start=1):
        try:
            _load_checked(job.overrides)
        except _bad_input() as error:
            _error(f"multirun job {number}/{len(jobs)} ({job.name()}): {error}; no job was run")
            return EXIT_USAGE
        except KeyboardInterrupt:
            _error("interrupted")
            return 128 + signal.SIGINT
    stopped = (128 + signal.SIGINT, 128 + signal.SIGTERM)
    outcomes = []
    try:
        for number, job in enumerate(jobs, start=1):
            print(f"[omni_sfp] multirun job {number}/{len(jobs)}: {' '.join(job.overrides)}", flush=True)
            outcomes.append(_job(job.overrides, close_env=number < len(jobs)))
            if outcomes[-1].code in stopped:  # the signal's sender wants the sweep gone, not its next job
                break
    finally:  # also when a job raised (a bug, CUDA out of memory): what ran before it is summed up
        rest = "" if len(outcomes) == len(jobs) else f"; jobs {len(outcomes) + 1}-{len(jobs)} were not started"
        print(f"[omni_sfp] multirun: {len(outcomes)} of {len(jobs)} jobs ran{rest}")
        print(table(jobs, outcomes), flush=True)
    codes = [outcome.code for outcome in outcomes]
    if codes and codes[-1] in stopped:
        return codes[-1]
    return next((code for code in codes if code != EXIT_OK), EXIT_OK)


def _job(argv: list[str], *, close_env: bool = False):
    """One run (a single run, or one job of a sweep): how it ended, as an :class:`~omni_sfp.run.sweep.Outcome`.

    ``close_env``: close the job's env when it ends, for the next job of a sweep (Isaac Lab allows one simulation
    in a process; a single run's env closes at exit, after the last line is printed)."""
    from omni_sfp.run.sweep import Outcome

    try:
        return _run(argv, close_env=close_env)
    except KeyboardInterrupt:  # Ctrl-C before training started (or a second one while stopping)
        _error("interrupted")
        return Outcome(128 + signal.SIGINT)


def _run(argv: list[str], *, close_env: bool = False):
    """Compose, validate, build and train (or play, with test=true); returns the exit code with the run's
    :class:`~omni_sfp.run.progress.Summary`, as an :class:`~omni_sfp.run.sweep.Outcome`."""
    from omni_sfp.run.compose import load_config
    from omni_sfp.run.sweep import Outcome, refuse_sweeps

    try:
        refuse_sweeps(argv)
        cfg = load_config(argv)
        draw_seed(cfg)
        from omni_sfp.run.runner import Runner

        runner = Runner(cfg)
    except _bad_input() as error:
        _error(error)
        return Outcome(EXIT_USAGE)
    try:
        return _use(runner, cfg)
    finally:
        if close_env:
            runner.env.close()


def _use(runner, cfg):
    """Train (or, with test=true, play) with a built runner; the :class:`~omni_sfp.run.sweep.Outcome`."""
    from omni_sfp.compute.device import precision_note
    from omni_sfp.run.checkpoint import CheckpointError
    from omni_sfp.run.outputs.base import OutputError
    from omni_sfp.run.sweep import Outcome

    if cfg.test:
        try:
            mean_return = runner.test()
        except (CheckpointError, OutputError) as error:
            _error(error)
            return Outcome(EXIT_USAGE)
        shown = "no episode finished" if mean_return is None else f"{mean_return:.2f}"
        print(
            f"Test: {cfg.task.name} | checkpoint {runner.resume_from} ({runner.played()}) | mean return "
            f"(deterministic): {shown}"
        )
        _print_outputs(runner)
        return Outcome(EXIT_OK, played_return=mean_return)

    from omni_sfp.compute.capture import CaptureError
    from omni_sfp.ppo.agent import NonFiniteError

    main_process = runner.run_dir is not None
    if main_process:
        resumed = f" | resuming {runner.resume_from}" if runner.resume_from else ""
        processes = f" x {runner.world_size} processes" if runner.world_size > 1 else ""
        print(
            f"[omni_sfp] task {cfg.task.name} | {runner.env.num_envs} envs on {runner.device}{processes} | "
            f"{precision_note(runner.device, cfg.train.mixed_precision)} | run folder {runner.run_dir}{resumed}",
            flush=True,
        )
    try:
        summary = runner.train()
    except (CheckpointError, OutputError, CaptureError) as error:  # e.g. a task that renders no frame
        _error(error)
        return Outcome(EXIT_USAGE, run_dir=runner.run_dir)
    except NonFiniteError as error:  # every rank of a multi-process run says it; rank 0 knows the checkpoint
        where = f" (last checkpoint: {runner.last_checkpoint or 'none written yet'})" if main_process else ""
        _error(f"{error}{where}")
        return Outcome(EXIT_FAILED, run_dir=runner.run_dir)
    except KeyboardInterrupt:  # a second SIGINT/SIGTERM while stopping: no checkpoint for the current iteration
        _error(f"interrupted before the iteration ended (last checkpoint: {runner.last_checkpoint or 'none'})")
        return Outcome(128 + signal.SIGINT, run_dir=runner.run_dir)
    code = EXIT_OK if summary.interrupted is None else 128 + signal.Signals[summary.interrupted]
    if not main_process:
        return Outcome(code, summary)
    if summary.final_return is not None:
        line = f"[omni_sfp] final return (deterministic): {summary.final_return:.2f}"
        if summary.optimal_return is not None:
            ratio = summary.final_return / summary.optimal_return
            line += f" | optimal: {summary.optimal_return:.2f} | cost vs optimal: {ratio:.3f}x"
        print(line)
    _print_outputs(runner)
    print(summary.line(), flush=True)
    if summary.interrupted is not None:
        print(
            f"[omni_sfp] stopped by {summary.interrupted} after iteration {summary.iterations}; checkpoint "
            f"{summary.checkpoint}; continue it with the same command plus resume=true checkpoint={summary.run_dir}",
            file=sys.stderr,
            flush=True,
        )
    return Outcome(code, summary)


def _print_outputs(runner) -> None:
    """What each output says at the end (where video=true's clips and export=true's files went)."""
    for output in runner.outputs:
        for line in output.lines():
            print(line)


if __name__ == "__main__":
    sys.exit(main())
