"""ConstantCost: fixed work per step, synchronised truncation, deterministic rewards with a learnable optimum."""

import pytest
import torch

from omni_sfp.tasks.constant_cost import ConstantCost


def test_sizes_are_constructor_kwargs():
    task = ConstantCost(3, observation_size=12, action_size=3)
    obs, _ = task.reset()
    assert obs.shape == (3, 12)
    assert task.action_space.shape == (3,)
    assert task.step(torch.zeros(3, 3))[0].shape == (3, 12)


def test_all_environments_truncate_together_and_never_terminate():
    task = ConstantCost(4, max_episode_length=10)
    task.reset()
    actions = torch.ones(4, 8)
    for step in range(1, 31):
        _, _, terminated, truncated, _ = task.step(actions)
        assert not terminated.any()
        assert truncated.all() if step % 10 == 0 else not truncated.any()


def test_rewards_are_a_deterministic_function_of_state_and_action():
    first, second = ConstantCost(8, seed=4), ConstantCost(8, seed=4)
    actions = torch.rand(8, 8, generator=torch.Generator().manual_seed(1)) * 2 - 1
    first.reset(), second.reset()
    for _ in range(5):
        obs_1, reward_1, *_ = first.step(actions)
        obs_2, reward_2, *_ = second.step(actions)
        assert torch.equal(obs_1, obs_2) and torch.equal(reward_1, reward_2)
    torch.testing.assert_close(reward_1[:, 0], -(obs_1 - first.target_state).square().mean(-1))


def test_holding_the_target_action_is_much_better_than_doing_nothing():
    task = ConstantCost(4, seed=0)

    def return_of(action):
        task.reset()
        return sum(task.step(action.expand(4, 8))[1].mean().item() for _ in range(20))

    at_target, idle = return_of(task.target_action), return_of(torch.zeros(8))
    assert at_target > 0.1 * idle
    task.step(task.target_action.expand(4, 8))
    assert task.step(task.target_action.expand(4, 8))[1].abs().max() < 1e-6  # settled on the target


def test_substeps_set_the_work_and_must_be_positive():
    short, long = ConstantCost(2, substeps=1), ConstantCost(2, substeps=8)
    actions = torch.zeros(2, 8)
    assert not torch.equal(short.step(actions)[0], long.step(actions)[0])
    with pytest.raises(ValueError, match="substeps"):
        ConstantCost(2, substeps=0)
