"""Deterministic evaluation: the mean return of a fixed number of episodes per environment.

Every environment contributes exactly its first ``episodes`` episodes. Counting instead every episode that
finishes within a fixed number of steps over-weights failures: a Cartpole env that drops the pole after 50
steps finishes ten episodes in 500 steps while one that balances finishes one, so 10 % failing envs pull a
mean of ~499 down to ~260. That was the runner's evaluation until issue 12.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import torch

from omni_sfp.run.outputs.base import RunOutput


def reset_every_env(env):
    """Start a new episode in every env of a skrl wrapper, also after training.

    skrl's wrappers of auto-resetting vector envs (Gymnasium's vector envs, Isaac Lab; our OmniIsaacGymEnvs
    wrapper does the same) reset only on their first ``reset()`` and then return the latest observations.
    An evaluation after training then starts in the middle of the training's episodes and counts their
    remainders as first episodes: a Hopper-v5 policy that scored 3378 from a reset was reported at 1913.
    ``_reset_once`` is that flag in skrl 2.1's wrappers and ours (pinned: skrl < 2.2)."""
    if hasattr(env, "_reset_once"):
        env._reset_once = True
    return env.reset()


def evaluate(
    env,
    act: Callable[[torch.Tensor], torch.Tensor],
    *,
    episodes: int,
    max_length: int,
    on_done: Callable[[torch.Tensor], None] | None = None,
) -> float | None:
    """Mean return of the first ``episodes`` episodes of every env of ``env`` (a skrl wrapper), stepping
    ``act(observations)``'s actions from a reset; None when no episode finished.

    :param max_length: The env's time limit: after ``episodes * max_length`` steps every env has finished
        ``episodes`` episodes. The loop runs that long without reading anything back (no host sync per step).
    :param on_done: told each step where an episode ended (a recurrent policy zeroes those hidden states).
    """
    observations, _ = reset_every_env(env)
    running = None
    total = torch.zeros((), dtype=torch.float64, device=observations.device)
    counted = None
    with torch.no_grad():
        for _ in range(int(max_length) * episodes):
            observations, rewards, terminated, truncated, _ = env.step(act(observations))
            rewards = rewards.reshape(-1).to(torch.float64)
            if running is None:
                running = torch.zeros_like(rewards)
                counted = torch.zeros(rewards.shape, dtype=torch.long, device=rewards.device)
            running = running + rewards
            done = (terminated | truncated).reshape(-1)
            if on_done is not None:
                on_done(done)
            take = done & (counted < episodes)
            total = total + torch.where(take, running, 0.0).sum()
            counted = counted + take.long()
            running = torch.where(done, 0.0, running)
    finished = int(counted.sum()) if counted is not None else 0
    return float(total) / finished if finished else None


def evaluate_agent(agent, env, episodes: int) -> float | None:
    """:func:`evaluate` with the agent's deterministic (mean) actions, in evaluation mode, for ``episodes``
    episodes per env; the time limit is the task's ``max_episode_length`` (1000 when it names none)."""
    task = getattr(env, "_env", None)  # the embedded task behind skrl's wrapper
    max_length = getattr(task, "max_episode_length", None) or getattr(env, "max_episode_length", 1000)
    agent.enable_training_mode(False)
    agent.enable_models_training_mode(False)

    def act(observations: torch.Tensor) -> torch.Tensor:
        return agent.act(observations, env.state(), timestep=0, timesteps=0)[1]["mean_actions"]

    # the cache statistics and a recurrent model's rollout hidden states stay the training's
    with agent.statistics_kept(), agent.hidden_states_kept():
        return evaluate(env, act, episodes=episodes, max_length=int(max_length), on_done=agent.end_episodes)


class FinalEvaluation(RunOutput):
    """The deterministic return at the end: one episode per env after training (``summary.final_return``; an
    interrupted run skips it, whoever sent the signal wants the process gone), ``test_episodes`` with ``test=true``
    (:attr:`mean_return`). After training, the last progress line says whether the final return kept what
    training reached (:meth:`omni_sfp.run.progress.Summary.final_record`), pointing to best.pt where it did not.

    :param progress_file: ``progress_file``, which gets that line too (progress.jsonl of the run folder always does).
    """

    order = 10

    def __init__(self, test_episodes: int, progress_file: str | None = None) -> None:
        self.test_episodes = test_episodes
        self.progress_file = progress_file
        self.mean_return: float | None = None

    def end(self, run, summary) -> None:
        if summary is None:
            self.mean_return = evaluate_agent(run.agent, run.env, self.test_episodes)
        elif summary.interrupted is None:
            summary.final_return = evaluate_agent(run.agent, run.env, 1)
            if summary.run_dir is not None:
                best = summary.best_checkpoint()
                if summary.below_training and best is not None and summary.checkpoint is not None:
                    summary.best_checkpoint_return = self._play(run, best, then=summary.checkpoint)
                line = json.dumps(summary.final_record())
                for path in [summary.run_dir / "progress.jsonl", *([self.progress_file] if self.progress_file else [])]:
                    with open(path, "a") as file:
                        file.write(line + "\n")

    @staticmethod
    def _play(run, best, *, then) -> float | None:
        """best.pt's deterministic return, one episode per env as the final one; then the models of checkpoint
        ``then`` (the last one written: the state training ended in) again, for the outputs after this one."""
        from omni_sfp.run import checkpoint as ckpt

        def restore(path) -> None:
            state = ckpt.load(path, run.agent.device)
            try:
                run.agent.load_state_dict(state["agent"], models_only=True)
            except (KeyError, RuntimeError, ValueError, AttributeError) as error:
                raise ckpt.CheckpointError(f"checkpoint {path}: does not fit this model/task ({error})") from None

        restore(best)
        try:
            return evaluate_agent(run.agent, run.env, 1)
        finally:
            restore(then)


def output_for(cfg, *, main: bool) -> FinalEvaluation | None:
    # test=true: every rank plays
    return FinalEvaluation(cfg.test_episodes, cfg.progress_file) if main or cfg.test else None
