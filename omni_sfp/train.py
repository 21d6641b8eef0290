"""``python -m omni_sfp.train [key=value ...]``: train (or, with test=true, play) PPO on a registered task.

OmniIsaacGymEnvs-style overrides, e.g. ``task=LQR60x8 num_envs=256 headless=True seed=1
max_iterations=200 train.mixed_precision=true``. Inside Isaac Sim (``python.sh -m omni_sfp.train task=Ant``)
Isaac tasks start the simulation app themselves before anything else from Omniverse is imported.
Multi-process: ``torchrun --nproc_per_node=N -m omni_sfp.train ...`` (docs/reliability.md).

``seed=-1`` draws a random seed (OmniIsaacGymEnvs and Isaac Lab): it is printed and saved in the run
folder's config.yaml, so the run reproduces with ``seed=<that seed>``.

Exit codes: 0 done; 2 bad input (config, task, checkpoint, a CUDA device this machine lacks), one line naming
the problem; 1 training failed (non-finite data with train.check_finite=raise), one line; 130 / 143 stopped by SIGINT / SIGTERM
after saving a checkpoint (128 + the signal number, the shell's convention: an interrupted run is not a
finished one, so `train && next` stops there).
"""

from __future__ import annotations

import secrets
import signal
import sys

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
        print(__doc__.strip())
        print(
            "\nEvery key, its default, range and meaning: omni_sfp/config/schema.py (the README's Configuration table)."
        )
        print("Every task, its sizes and config source: python -m omni_sfp.list_tasks")
        return EXIT_OK
    from omni_sfp.compute import distributed

    distributed.setup()  # before anything imports skrl (see omni_sfp/compute/distributed.py)
    try:
        return _run(argv)
    except KeyboardInterrupt:  # Ctrl-C before training started (or a second one while stopping)
        _error("interrupted")
        return 128 + signal.SIGINT
    finally:
        distributed.teardown()


def _run(argv: list[str]) -> int:
    from omni_sfp.envs.isaaclab import IsaacLabError
    from omni_sfp.envs.oige import OIGEError
    from omni_sfp.envs.registry import MissingDependencyError, UnknownTaskError
    from omni_sfp.run.checkpoint import CheckpointError
    from omni_sfp.run.compose import ConfigError, load_config

    # bad input: the config, the checkpoint, or a task this machine cannot build (its simulator is missing).
    # Not any RuntimeError: a CUDA out-of-memory or a bug is no bad input and keeps its traceback.
    bad_input = (ConfigError, CheckpointError, UnknownTaskError, MissingDependencyError, IsaacLabError, OIGEError)
    try:
        cfg = load_config(argv)
        draw_seed(cfg)
        if cfg.train.models.compile is not True:  # eager (or auto: eager first) traces nothing yet: skip
            # torch._dynamo's import (~4 s); compile_policy.compile_trunk restores torch's guards if auto compiles
            from omni_sfp.compute.coldstart import defer_dynamo_import

            defer_dynamo_import()
        from omni_sfp.compute.device import precision_note
        from omni_sfp.run.runner import Runner

        runner = Runner(cfg)
        if cfg.train.models.compile is not True:
            from omni_sfp.compute.coldstart import eager_optimizer_step

            eager_optimizer_step(runner.agent.optimizer)
    except bad_input as error:
        _error(error)
        return EXIT_USAGE

    if cfg.test:
        from omni_sfp.run.outputs.video import VideoError

        try:
            mean_return = runner.test()
        except (CheckpointError, VideoError) as error:
            _error(error)
            return EXIT_USAGE
        shown = "no episode finished" if mean_return is None else f"{mean_return:.2f}"
        print(f"Test: {cfg.task.name} | checkpoint {runner.resume_from} | mean return (deterministic): {shown}")
        _print_outputs(runner)
        return EXIT_OK

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
    from omni_sfp.run.outputs.video import VideoError
    from omni_sfp.run.outputs.wandb_logging import WandbError

    try:
        summary = runner.train()
    except (CheckpointError, VideoError, WandbError) as error:
        _error(error)
        return EXIT_USAGE
    except NonFiniteError as error:  # every rank of a multi-process run says it; rank 0 knows the checkpoint
        where = f" (last checkpoint: {runner.last_checkpoint or 'none written yet'})" if main_process else ""
        _error(f"{error}{where}")
        return EXIT_FAILED
    except KeyboardInterrupt:  # a second SIGINT/SIGTERM while stopping: no checkpoint for the current iteration
        _error(f"interrupted before the iteration ended (last checkpoint: {runner.last_checkpoint or 'none'})")
        return 128 + signal.SIGINT
    if not main_process:
        return EXIT_OK if summary.interrupted is None else 128 + signal.Signals[summary.interrupted]
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
        return 128 + signal.Signals[summary.interrupted]
    return EXIT_OK


def _print_outputs(runner) -> None:
    """Where video=true's clips and export=true's files went."""
    if runner.videos:
        many = f" (+{len(runner.videos) - 1} more in that folder)" if len(runner.videos) > 1 else ""
        print(f"[omni_sfp] video: {runner.videos[-1]}{many}")
    if runner.exported is not None:
        print(f"[omni_sfp] exported policy: {runner.exported.torchscript} and {runner.exported.onnx}")


if __name__ == "__main__":
    sys.exit(main())
