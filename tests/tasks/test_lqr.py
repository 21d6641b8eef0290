"""LQR60x8: the dynamics and cost as documented, and the Riccati optimum reached by the LQR controller."""

import numpy as np
import pytest
import torch

from omni_sfp.tasks.lqr import LQR60x8


def episode_return(task, policy):
    obs, _ = task.reset()
    total = torch.zeros(task.num_envs)
    for step in range(task.max_episode_length):
        obs, reward, terminated, truncated, _ = task.step(policy(obs))
        total += reward[:, 0]
        assert not terminated.any()
        assert truncated.all() == (step == task.max_episode_length - 1)
    return total.mean().item()


def test_horizon_can_be_reported_as_terminal_instead():
    task = LQR60x8(3, horizon_is_terminal=True)
    task.reset()
    for step in range(task.max_episode_length):
        _, _, terminated, truncated, _ = task.step(torch.zeros(3, 8))
        assert terminated.all() == (step == task.max_episode_length - 1) and not truncated.any()


def test_system_is_stable_ish_controllable_and_fixed_by_system_seed():
    task = LQR60x8(2, seed=0)
    assert np.max(np.abs(np.linalg.eigvals(task.A))) == pytest.approx(0.99)
    controllability = np.hstack([np.linalg.matrix_power(task.A, k) @ task.B for k in range(60)])
    assert np.linalg.matrix_rank(controllability) == 60
    assert np.array_equal(LQR60x8(2, seed=5).A, task.A)  # the env seed moves initial states, not the system
    assert not np.array_equal(LQR60x8(2, system_seed=1).A, task.A)


def test_spaces_are_ant_sized_and_actions_unbounded():
    task = LQR60x8(2)
    assert task.observation_space.shape == (60,)
    assert task.action_space.shape == (8,)
    assert np.isinf(task.action_space.high).all()


def test_step_is_the_linear_dynamics_and_quadratic_cost():
    task = LQR60x8(16, seed=2, action_cost=0.5)
    x, _ = task.reset()
    u = torch.randn(16, 8, generator=torch.Generator().manual_seed(0))
    next_x, reward, _, _, _ = task.step(u)
    x64, u64 = x.double().numpy(), u.double().numpy()
    np.testing.assert_allclose(next_x.numpy(), x64 @ task.A.T + u64 @ task.B.T, rtol=1e-4, atol=1e-5)
    cost = np.einsum("ni,ij,nj->n", x64, task.Q, x64) + np.einsum("ni,ij,nj->n", u64, task.R, u64)
    np.testing.assert_allclose(reward[:, 0].numpy(), -cost, rtol=1e-5)


def test_lqr_controller_reaches_the_optimal_return_and_other_policies_do_not():
    task = LQR60x8(2048, seed=1, max_episode_length=50)
    optimal = task.optimal_return()
    assert -10.0 < optimal < -1.0  # moderate returns
    assert episode_return(task, task.optimal_action) == pytest.approx(optimal, rel=0.02)
    assert episode_return(task, lambda obs: torch.zeros(obs.shape[0], 8)) < 2 * optimal
    noise = torch.Generator().manual_seed(0)
    assert episode_return(task, lambda obs: torch.randn(obs.shape[0], 8, generator=noise)) < 10 * optimal


def test_optimal_return_accounts_for_process_noise():
    task = LQR60x8(2048, seed=1, max_episode_length=50, process_noise_std=0.3)
    optimal = task.optimal_return()
    assert optimal < LQR60x8(2, max_episode_length=50).optimal_return()
    assert episode_return(task, task.optimal_action) == pytest.approx(optimal, rel=0.02)


def test_action_cost_must_be_positive():
    with pytest.raises(ValueError, match="action_cost"):
        LQR60x8(2, action_cost=0.0)
