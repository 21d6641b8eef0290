"""``python -m omni_sfp.train [key=value ...]``: train (or, with test=true, play) PPO on a registered task.

OmniIsaacGymEnvs-style overrides, e.g. ``task=LQR60x8 num_envs=256 headless=True seed=1
max_iterations=200 train.mixed_precision=true``. Bad input prints one line naming the problem and exits
with code 2. Inside Isaac Sim (``python.sh -m omni_sfp.train task=Ant``) Isaac tasks start the simulation
app themselves before anything else from Omniverse is imported.
"""

from __future__ import annotations

import sys

from omni_sfp.config import ConfigError, load_config

EXIT_USAGE = 2


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if any(arg in ("-h", "--help") for arg in argv):
        print(__doc__.strip())
        print("\nEvery key, its default and meaning: README.md (Configuration) or cfg/config.yaml.")
        return 0
    from omni_sfp.checkpoint import CheckpointError
    from omni_sfp.registry import UnknownTaskError

    try:
        cfg = load_config(argv)
        from omni_sfp.runner import Runner, precision_note

        runner = Runner(cfg)
    except (ConfigError, CheckpointError, UnknownTaskError, RuntimeError) as error:
        print(f"omni_sfp.train: error: {error}", file=sys.stderr)
        return EXIT_USAGE

    if cfg.test:
        try:
            mean_return = runner.test()
        except CheckpointError as error:
            print(f"omni_sfp.train: error: {error}", file=sys.stderr)
            return EXIT_USAGE
        shown = "no episode finished" if mean_return is None else f"{mean_return:.2f}"
        print(f"Test: {cfg.task.name} | checkpoint {runner.resume_from} | mean return (deterministic): {shown}")
        return 0

    print(f"[omni_sfp] task {cfg.task.name} | {runner.env.num_envs} envs on {runner.device} | "
          f"{precision_note(runner.device, cfg.train.mixed_precision)} | run folder {runner.run_dir}", flush=True)
    try:
        summary = runner.train()
    except CheckpointError as error:
        print(f"omni_sfp.train: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    if summary.final_return is not None:
        line = f"[omni_sfp] final return (deterministic): {summary.final_return:.2f}"
        if summary.optimal_return is not None:
            ratio = summary.final_return / summary.optimal_return
            line += f" | optimal: {summary.optimal_return:.2f} | cost vs optimal: {ratio:.3f}x"
        print(line)
    print(summary.line(), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
