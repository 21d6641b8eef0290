"""The deterministic evaluation counts every env's first episodes, once each."""

import pytest
import torch

from omni_sfp.run.outputs.evaluation import evaluate
from omni_sfp.tasks.base import VecTask


class FallsEarly(VecTask):
    """Reward 1 per step; env 0 terminates every ``short`` steps, the others run to the time limit."""

    def __init__(self, num_envs: int, *, max_episode_length: int = 10, short: int = 2):
        self.short = short
        super().__init__(
            num_envs,
            "cpu",
            0,
            max_episode_length=max_episode_length,
            observation_size=1,
            action_size=1,
            action_bound=1.0,
            validate_actions=False,
        )

    def _sample_initial_state(self):
        return torch.zeros(self.num_envs, 1)

    def _advance(self, actions):
        self.state = self.state + 1
        terminated = torch.zeros(self.num_envs, dtype=torch.bool)
        terminated[0] = bool(self.state[0, 0] >= self.short)
        return torch.ones(self.num_envs), terminated

    def _observations(self):
        return self.state


@pytest.mark.parametrize("episodes", [1, 3])
def test_each_env_counts_its_first_episodes_only(episodes):
    env = FallsEarly(10)
    mean = evaluate(env, lambda obs: torch.zeros(10, 1), episodes=episodes, max_length=10)
    # env 0 returns 2 per episode, the 9 others 10: (2 + 9 * 10) / 10, not (5 * 2 + 9 * 10) / 14 for 1 episode
    assert mean == pytest.approx((2 + 9 * 10) / 10)


def test_no_finished_episode_gives_none():
    env = FallsEarly(3, max_episode_length=50, short=100)
    assert evaluate(env, lambda obs: torch.zeros(3, 1), episodes=1, max_length=10) is None


class FirstDone:
    """Passes a skrl wrapper through and notes the step at which each env first finished an episode."""

    def __init__(self, env) -> None:
        self.env, self.steps, self.first_done = env, 0, None

    def reset(self):
        self.steps, self.first_done = 0, None
        return self.env.reset()

    def step(self, actions):
        observations, rewards, terminated, truncated, infos = self.env.step(actions)
        self.steps += 1
        done = (terminated | truncated).reshape(-1)
        if self.first_done is None:
            self.first_done = torch.full(done.shape, -1)
        self.first_done = torch.where(done & (self.first_done < 0), self.steps, self.first_done)
        return observations, rewards, terminated, truncated, infos

    def __getattr__(self, name):
        return getattr(self.env, name)

    def __setattr__(self, name, value):
        if name == "_reset_once":
            setattr(self.env, name, value)
        else:
            super().__setattr__(name, value)


def test_an_evaluation_after_training_starts_every_env_from_a_reset():
    """skrl's Gymnasium wrapper resets a vector env only once: after 50 steps of "training", an evaluation must
    still see whole first episodes (Pendulum-v1: 200 steps each, it never terminates), not their remainders."""
    from omni_sfp.envs.registry import make_env

    env = make_env("gym:Pendulum-v1", num_envs=3, device="cpu", seed=0)
    env.reset()
    for _ in range(50):
        env.step(torch.zeros(3, 1))
    watched = FirstDone(env)
    assert evaluate(watched, lambda observations: torch.zeros(3, 1), episodes=1, max_length=200) is not None
    assert watched.first_done.tolist() == [200, 200, 200]
    env.close()
