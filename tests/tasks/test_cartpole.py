"""Cartpole: the physics, OmniIsaacGymEnvs' reward, terminations and truncation."""

import math

import numpy as np
import pytest
import torch
from scipy.integrate import solve_ivp

from omni_sfp.tasks.cartpole import Cartpole


def set_state(task, cart_pos=0.0, cart_vel=0.0, angle=0.0, angle_vel=0.0):
    task.state = torch.tensor([[cart_pos, cart_vel, angle, angle_vel]], device=task.device).repeat(task.num_envs, 1)


def energy(task, obs):
    """Mechanical energy of a uniform rod (half-length l) pivoting on a cart, written out independently."""
    _, x_dot, theta, theta_dot = obs.double().unbind(-1)
    cart, pole, half, g = task.CART_MASS, task.POLE_MASS, task.POLE_HALF_LENGTH, task.GRAVITY
    kinetic = (
        0.5 * (cart + pole) * x_dot**2
        + pole * half * x_dot * theta_dot * theta.cos()
        + 0.5 * (4.0 / 3.0) * pole * half**2 * theta_dot**2
    )
    return kinetic + pole * g * half * theta.cos()


def classic_equations(_, state, cart=Cartpole.CART_MASS, pole=Cartpole.POLE_MASS, half=Cartpole.POLE_HALF_LENGTH):
    """Unforced cart-pole of Barto, Sutton & Anderson (1983) as Gymnasium's CartPole writes it, for solve_ivp."""
    _, x_dot, theta, theta_dot = state
    total = cart + pole
    temp = pole * half * theta_dot**2 * np.sin(theta) / total
    theta_acc = (Cartpole.GRAVITY * np.sin(theta) - np.cos(theta) * temp) / (
        half * (4.0 / 3.0 - pole * np.cos(theta) ** 2 / total)
    )
    x_acc = temp - pole * half * theta_acc * np.cos(theta) / total
    return [x_dot, x_acc, theta_dot, theta_acc]


def horizontal_momentum(task, obs):
    _, x_dot, theta, theta_dot = obs.double().unbind(-1)
    return (task.CART_MASS + task.POLE_MASS) * x_dot + task.POLE_MASS * task.POLE_HALF_LENGTH * theta_dot * theta.cos()


def test_spaces_and_max_return():
    task = Cartpole(4)
    assert task.observation_space.shape == (4,)
    assert task.action_space.shape == (1,)
    assert (task.action_space.low, task.action_space.high) == (-1.0, 1.0)
    assert task.max_episode_length == 500
    assert task.max_episode_return == 500.0
    assert Cartpole(4, max_episode_length=200).max_episode_return == 200.0


def test_initial_states_follow_oige_ranges():
    task = Cartpole(4096, seed=3)
    obs, _ = task.reset()
    half_widths = torch.tensor([1.0, 0.5, math.pi / 8, 0.5])
    assert (obs.abs() <= half_widths).all()
    assert (obs.abs().amax(0) > 0.9 * half_widths).all()  # the whole range is used


def test_pole_falls_without_control_and_the_fall_terminates():
    task = Cartpole(1)
    set_state(task, angle=0.05)
    zero = torch.zeros(1, 1)
    angles = []
    for _ in range(100):
        obs, reward, terminated, truncated, _ = task.step(zero)
        if terminated.item():
            break
        angles.append(obs[0, 2].item())
    assert terminated.item() and not truncated.item()
    assert reward.item() == -2.0
    assert all(b > a for a, b in zip(angles, angles[1:]))  # leaning towards +x, it keeps falling that way
    assert angles[-1] > 1.0


def test_pushing_the_cart_forward_tips_the_pole_backward():
    task = Cartpole(1)
    set_state(task)
    obs, *_ = task.step(torch.ones(1, 1))
    assert obs[0, 1] > 0  # the cart accelerates along the force
    assert obs[0, 3] < 0  # the upright pole rotates the other way


def test_unforced_motion_follows_the_classic_equations_and_conserves_energy_and_momentum():
    task = Cartpole(1)
    set_state(task, cart_vel=0.3, angle=0.4, angle_vel=-0.5)
    start = task.state.clone()
    zero = torch.zeros(1, 1)
    for _ in range(15):  # half a second: the pole falls from 0.4 rad to about 1 rad
        obs, _, terminated, _, _ = task.step(zero)
    assert not terminated.item()

    exact = solve_ivp(classic_equations, (0.0, 0.5), start[0].double().tolist(), rtol=1e-8, atol=1e-10).y[:, -1]
    np.testing.assert_allclose(obs[0].numpy(), exact, atol=0.05)  # semi-implicit Euler's error at 1/60 s
    assert energy(task, obs).item() == pytest.approx(energy(task, start).item(), rel=0.05)
    assert horizontal_momentum(task, obs).item() == pytest.approx(horizontal_momentum(task, start).item(), rel=0.05)


def test_actions_are_clipped_to_max_effort():
    saturated, unit = Cartpole(1), Cartpole(1)
    set_state(saturated)
    set_state(unit)
    obs_saturated, *_ = saturated.step(torch.full((1, 1), 5.0))
    obs_unit, *_ = unit.step(torch.ones(1, 1))
    torch.testing.assert_close(obs_saturated, obs_unit)


def test_reward_is_oige_formula_of_the_new_state():
    task = Cartpole(256, seed=1)
    task.reset()
    actions = 2.0 * torch.rand(256, 1, generator=torch.Generator().manual_seed(0)) - 1.0
    obs, reward, terminated, truncated, _ = task.step(actions)
    assert not (terminated | truncated).any()
    x_dot, theta, theta_dot = obs[:, 1], obs[:, 2], obs[:, 3]
    expected = 1.0 - theta**2 - 0.01 * x_dot.abs() - 0.005 * theta_dot.abs()
    torch.testing.assert_close(reward[:, 0], expected)


def test_leaving_the_rail_terminates_with_penalty_and_resets():
    task = Cartpole(2, reset_dist=3.0)
    task.state = torch.tensor([[2.99, 5.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    obs, reward, terminated, truncated, _ = task.step(torch.zeros(2, 1))
    assert terminated[:, 0].tolist() == [True, False]
    assert not truncated.any()
    assert reward[0, 0] == -2.0 and reward[1, 0] == 1.0
    assert obs[0, 0].abs() <= 1.0  # the first observation of the next episode
    assert task.episode_length.tolist() == [0, 1]


def test_episodes_truncate_at_max_episode_length():
    task = Cartpole(8, max_episode_length=5)
    first, _ = task.reset()
    zero = torch.zeros(8, 1)
    for _ in range(4):
        _, _, terminated, truncated, _ = task.step(zero)
        assert not (terminated | truncated).any()
    obs, _, terminated, truncated, _ = task.step(zero)
    assert truncated.all() and not terminated.any()
    assert (task.episode_length == 0).all()
    assert not torch.equal(obs, first)  # freshly sampled, not the old initial states


def test_cartpole_positions_observes_the_cart_position_and_pole_angle_only_and_moves_as_cartpole():
    from omni_sfp.tasks.cartpole import CartpolePositions

    full, partial = Cartpole(4, seed=3), CartpolePositions(4, seed=3)
    assert partial.observation_space.shape == (2,)
    observations, _ = partial.reset()
    full.reset()
    assert torch.equal(observations, full.state[:, [0, 2]])
    actions = torch.full((4, 1), 0.5)
    for _ in range(20):
        partial_step, full_step = partial.step(actions), full.step(actions)
        assert torch.equal(partial_step[0], full_step[0][:, [0, 2]])  # the same dynamics, velocities hidden
        assert torch.equal(partial_step[1], full_step[1])
