"""The deterministic evaluation counts every env's first episodes, once each."""

import pytest
import torch

from omni_sfp.evaluation import evaluate
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
