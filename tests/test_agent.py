"""SFPPPO's own ``update()`` against skrl 2.1.1's ``PPO.update``, GAE by hand, and the agent's state.

The pin: our agent and skrl's own PPO run on identical seeds, data, models and settings (fp32, the defaults
that carry state: observation and value normalisation, KL-adaptive learning rate, value clip, entropy bonus,
grad-norm clip, time-limit bootstrap, reward shaping). Our update is designed to do the same arithmetic in
the same order, so the losses of every update and the parameters after it must be *bitwise* equal. The day
skrl changes its update (loss, sampling, normalisation order, schedule) these tests fail.
"""

from __future__ import annotations

import copy
import functools
import math
import statistics

import gymnasium
import pytest
import torch
from ppo_driver import BOX_ACT, BOX_OBS, make_agent, run
from skrl.agents.torch.ppo import PPO
from skrl.agents.torch.ppo.ppo import compute_gae as skrl_compute_gae
from skrl.resources.preprocessors.torch import RunningStandardScaler
from skrl.resources.schedulers.torch import KLAdaptiveLR

from omni_sfp.ppo.agent import SFPPPO, compute_gae, soft_action_bounds
from omni_sfp.ppo.step import bounds_loss
from omni_sfp.sfp.models import SharedActorCritic, mlp_models

UNITS = (16, 16)
SETTINGS = {
    "rollouts": 8,
    "learning_epochs": 3,
    "mini_batches": 4,
    "learning_rate": 1e-3,
    "discount_factor": 0.99,
    "gae_lambda": 0.95,
    "learning_rate_scheduler": KLAdaptiveLR,
    "learning_rate_scheduler_kwargs": {"kl_threshold": 0.008},
    "observation_preprocessor": RunningStandardScaler,
    "observation_preprocessor_kwargs": {"size": BOX_OBS, "device": "cpu"},
    "value_preprocessor": RunningStandardScaler,
    "value_preprocessor_kwargs": {"size": 1, "device": "cpu"},
    "grad_norm_clip": 0.5,
    "ratio_clip": 0.2,
    "value_clip": 0.2,
    "entropy_loss_scale": 0.01,
    "value_loss_scale": 2.0,
    "time_limit_bootstrap": True,
    "rewards_shaper": lambda rewards, timestep, timesteps: rewards * 0.1,
}


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the same kernels, in the same order, for both agents
    yield
    torch.set_num_threads(threads)


def make_models(kind: str) -> dict:
    torch.manual_seed(7)
    if kind == "separate":
        return mlp_models(BOX_OBS, BOX_ACT, "cpu", units=UNITS, separate=True)
    model = SharedActorCritic(BOX_OBS, BOX_ACT, "cpu", units=UNITS, single_forward_pass=kind == "shared-sfp")
    return {"policy": model, "value": model}


def train(agent_class, models: dict, updates: int, **settings) -> tuple[PPO, list[dict[str, list]]]:
    """``updates`` updates driven the skrl way (ppo_driver); the TensorBoard-bound values of each update."""
    agent = make_agent(models, agent_class=agent_class, **{**SETTINGS, **settings})
    tracked = []
    torch.manual_seed(11)  # actions, minibatch permutations: the global generator, drawn from in the same order
    for _ in range(updates):
        policy_losses = run(agent, agent.cfg.rollouts, seed=len(tracked))  # it pops the policy loss's tag
        tracked.append({"Loss / Policy loss": policy_losses, **{k: list(v) for k, v in agent.tracking_data.items()}})
        agent.tracking_data.clear()
    return agent, tracked


def flat(models: dict) -> torch.Tensor:
    unique = {id(m): m for m in models.values()}.values()
    return torch.cat([p.detach().flatten() for model in unique for p in model.parameters()])


def flat_parameters(agent: PPO) -> torch.Tensor:
    return flat({"policy": agent.policy, "value": agent.value})


@pytest.mark.parametrize("gather", ["per epoch", "per minibatch"])
@pytest.mark.parametrize("kind", ["shared-sfp", "shared-double", "separate"])
def test_our_update_is_skrls_bit_for_bit(kind, gather, monkeypatch):
    """Both ways of gathering the samples (once an epoch, or a minibatch at a time as for images) take skrl's rows."""
    import omni_sfp.ppo.agent

    if gather == "per minibatch":
        monkeypatch.setattr(omni_sfp.ppo.minibatches, "PER_MINIBATCH_GATHER_BYTES", 0)
    models = make_models(kind)
    skrl_agent, skrl_tracked = train(PPO, copy.deepcopy(models), updates=3)
    ours, our_tracked = train(SFPPPO, copy.deepcopy(models), updates=3)

    for update, (theirs, mine) in enumerate(zip(skrl_tracked, our_tracked)):
        for tag in (
            "Loss / Policy loss",
            "Loss / Value loss",
            "Loss / Entropy loss",
            "Policy / Standard deviation",
            "Learning / Learning rate",
        ):
            assert mine[tag] == theirs[tag], f"update {update}: {tag} {mine[tag]} != skrl's {theirs[tag]}"
    assert torch.equal(flat_parameters(ours), flat_parameters(skrl_agent))
    assert ours.optimizer.param_groups[0]["lr"] == skrl_agent.optimizer.param_groups[0]["lr"]
    for name in ("observation_preprocessor", "value_preprocessor"):
        mine, theirs = ours.checkpoint_modules[name].state_dict(), skrl_agent.checkpoint_modules[name].state_dict()
        assert all(torch.equal(mine[key], theirs[key]) for key in theirs), name
    for mine, theirs in zip(ours.optimizer.state.values(), skrl_agent.optimizer.state.values()):
        assert torch.equal(mine["exp_avg"], theirs["exp_avg"]) and torch.equal(mine["exp_avg_sq"], theirs["exp_avg_sq"])


def test_with_the_kl_early_stop_the_same_minibatches_are_stepped_as_in_skrl():
    models = make_models("shared-sfp")
    skrl_agent, _ = train(PPO, copy.deepcopy(models), updates=3, kl_threshold=1e-4)
    ours, _ = train(SFPPPO, copy.deepcopy(models), updates=3, kl_threshold=1e-4)
    assert torch.equal(flat_parameters(ours), flat_parameters(skrl_agent))
    assert ours.last_losses["minibatches"] < ours.cfg.learning_epochs * ours.cfg.mini_batches  # it did stop early


def test_update_returns_its_losses_as_numbers():
    ours, tracked = train(SFPPPO, make_models("shared-sfp"), updates=1)
    losses = ours.last_losses
    assert {"policy_loss", "value_loss", "entropy_loss", "kl", "std", "learning_rate", "minibatches"} <= set(losses)
    assert losses["policy_loss"] == tracked[0]["Loss / Policy loss"][0]
    assert losses["minibatches"] == ours.cfg.learning_epochs * ours.cfg.mini_batches
    assert losses["kl"] > 0 and losses["std"] > 0


def test_fused_adam_with_the_clip_in_its_step_moves_parameters_as_clip_then_adam_within_rounding():
    """One optimizer step (1 epoch x 1 minibatch), the clip active (grad_norm_clip far below the gradient norm).

    Bound: at Adam's first step the update of each parameter is ``lr * g / (|g| + eps)``, at most ``lr`` in
    size. The fused kernel computes the same formula in another order and divides by the clip factor instead
    of multiplying by its inverse: a few roundings of relative size 2**-24 each (16 allowed) on a quantity of
    size <= lr, plus one rounding of the parameter itself (1 ulp)."""
    models = make_models("shared-sfp")
    settings = {
        "learning_epochs": 1,
        "mini_batches": 1,
        "grad_norm_clip": 1e-3,
        "learning_rate_scheduler": None,
        "learning_rate_scheduler_kwargs": {},
    }
    skrl_agent, skrl_tracked = train(PPO, copy.deepcopy(models), updates=1, **settings)
    fused = functools.partial(SFPPPO, fused_optimizer=True)
    agent, tracked = train(fused, copy.deepcopy(models), updates=1, **settings)
    assert agent.optimizer.defaults["fused"]
    assert tracked[0]["Loss / Policy loss"] == skrl_tracked[0]["Loss / Policy loss"]  # before the step: equal
    before, ours, theirs = flat(models), flat_parameters(agent), flat_parameters(skrl_agent)
    lr = SETTINGS["learning_rate"]
    bound = 16 * 2**-24 * lr + torch.finfo(torch.float32).eps * theirs.abs()
    assert (ours - theirs).abs().le(bound).all(), (ours - theirs).abs().max()
    assert (theirs - before).abs().max() > 100 * bound.max()  # the step itself is far above the bound


def test_with_the_kl_early_stop_every_shareable_call_is_counted_as_it_happens_and_served():
    model = make_models("shared-sfp")["policy"]
    agent, _ = train(SFPPPO, {"policy": model, "value": model}, updates=3, kl_threshold=1e-4)
    assert agent.last_losses["minibatches"] < agent.cfg.learning_epochs * agent.cfg.mini_batches
    assert agent.shareable_calls == model.sfp_stats.hits
    assert agent.sfp_share_rate == 1.0


def test_the_update_leaves_no_cache_entry_behind():
    model = make_models("shared-sfp")["policy"]
    agent, _ = train(SFPPPO, {"policy": model, "value": model}, updates=1)
    assert all(cache._entry is None for cache in agent._caches)


def test_state_dict_round_trip_restores_models_optimizer_normalisers_and_counters():
    agent, _ = train(SFPPPO, make_models("shared-sfp"), updates=2)
    state = copy.deepcopy(agent.state_dict())
    fresh = make_agent(make_models("shared-sfp"), agent_class=SFPPPO, **SETTINGS)
    fresh.load_state_dict(state)
    assert torch.equal(flat_parameters(fresh), flat_parameters(agent))
    assert fresh.optimizer.state_dict()["param_groups"] == agent.optimizer.state_dict()["param_groups"]
    assert torch.equal(fresh._observation_preprocessor.running_mean, agent._observation_preprocessor.running_mean)
    assert (fresh._rollout, fresh.shareable_calls, fresh.sfp_stats) == (
        agent._rollout,
        agent.shareable_calls,
        agent.sfp_stats,
    )
    assert fresh.scheduler.get_last_lr() == agent.scheduler.get_last_lr()


# -- GAE -------------------------------------------------------------------------------------------------------
def test_gae_by_hand():
    """One env, three steps, the episode ends after step 1; gamma 0.9, lambda 0.8:
    A2 = 3 - 1.5 + 0.9 * 2.0 = 3.3; A1 = 2 - 1.0 = 1.0 (done: no bootstrap);
    A0 = 1 - 0.5 + 0.9 * (1.0 + 0.8 * 1.0) = 2.12; returns = A + V."""

    def column(*xs):
        return torch.tensor(xs).view(-1, 1, 1)

    returns, advantages = compute_gae(
        rewards=column(1.0, 2.0, 3.0),
        dones=column(False, True, False),
        values=column(0.5, 1.0, 1.5),
        last_values=torch.tensor([[2.0]]),
        discount_factor=0.9,
        gae_lambda=0.8,
    )
    raw = [2.12, 1.0, 3.3]
    assert returns.flatten().tolist() == pytest.approx([2.62, 2.0, 4.8], abs=1e-6)
    mean, std = statistics.fmean(raw), statistics.stdev(raw)
    assert advantages.flatten().tolist() == pytest.approx([(a - mean) / std for a in raw], abs=1e-6)


def test_gae_keeps_environments_apart_and_a_done_cuts_the_bootstrap():
    rewards = torch.ones(2, 2, 1)
    dones = torch.tensor([[[False], [True]], [[False], [False]]])
    returns, _ = compute_gae(
        rewards=rewards,
        dones=dones,
        values=torch.zeros(2, 2, 1),
        last_values=torch.tensor([[10.0], [10.0]]),
        discount_factor=0.5,
        gae_lambda=1.0,
    )
    # env 0: 1 + 0.5 * (1 + 0.5 * 10) = 4; env 1: done after step 0 -> 1; then 1 + 0.5 * 10 = 6
    assert returns[:, 0, 0].tolist() == [4.0, 6.0]
    assert returns[:, 1, 0].tolist() == [1.0, 6.0]


@pytest.mark.parametrize("bootstrap", [True, False])
def test_gae_is_skrls_bitwise(bootstrap):
    generator = torch.Generator().manual_seed(3)
    rewards, values = torch.randn(16, 8, 1, generator=generator), torch.randn(16, 8, 1, generator=generator)
    terminated = torch.rand(16, 8, 1, generator=generator) < 0.1
    truncated = torch.rand(16, 8, 1, generator=generator) < 0.1
    last_values = torch.randn(8, 1, generator=generator)
    theirs = skrl_compute_gae(
        rewards=rewards,
        terminated=terminated,
        truncated=truncated,
        values=values,
        last_values=last_values,
        discount_factor=0.99,
        lambda_coefficient=0.95,
        time_limit_bootstrap=bootstrap,
    )
    mine = compute_gae(
        rewards=rewards,
        dones=terminated | truncated if bootstrap else terminated,
        values=values,
        last_values=last_values,
        discount_factor=0.99,
        gae_lambda=0.95,
    )
    assert all(torch.equal(a, b) for a, b in zip(mine, theirs))


def test_bounds_loss_is_rl_games_bound_loss_by_hand():
    """rl_games' ``bound_loss`` (a2c_continuous.py): soft bound 1.1 on actions in [-1, 1]; here 1.1x the range
    around its centre, so an action space of [0, 4] has soft bounds [-0.2, 4.2]."""
    low, high = soft_action_bounds(gymnasium.spaces.Box(0.0, 4.0, (2,)), "cpu")
    assert torch.allclose(low, torch.tensor([-0.2, -0.2])) and torch.allclose(high, torch.tensor([4.2, 4.2]))
    means = torch.tensor([[5.2, 1.0], [-1.2, 4.2]])  # excess 1.0, 0 | 1.0, 0
    assert torch.allclose(bounds_loss(means, low, high), torch.tensor((1.0 + 1.0) / 2))
    assert soft_action_bounds(gymnasium.spaces.Box(-float("inf"), float("inf"), (2,)), "cpu") is None


def test_the_bound_loss_brings_a_runaway_policy_mean_back_and_scale_0_is_skrls_update():
    """A policy whose mean sits at 4 (beyond the [-1, 1] bounds): with the bound loss the updates pull it
    towards 1.1; without it (scale 0, skrl's PPO) they do not, and the update is skrl's bit for bit."""

    def runaway() -> dict:
        models = make_models("shared-sfp")
        with torch.no_grad():
            models["policy"].policy_head.linear.bias.fill_(4.0)
        return models

    def mean_action(agent) -> float:
        with torch.no_grad():
            observations = agent._observation_preprocessor(
                torch.randn(256, 6, generator=torch.Generator().manual_seed(0))
            )
            return float(agent.policy.act({"observations": observations}, role="policy")[1]["mean_actions"].mean())

    without, _ = train(SFPPPO, runaway(), updates=3)
    skrl, _ = train(PPO, runaway(), updates=3)
    assert torch.equal(flat_parameters(without), flat_parameters(skrl))
    pulled, _ = train(functools.partial(SFPPPO, bounds_loss_scale=1.0), runaway(), updates=3)
    assert mean_action(pulled) < mean_action(without) - 0.01 and mean_action(without) > 3.5


def test_learning_rate_anneal_falls_linearly_over_the_run_and_caps_the_kl_adaptive_rate():
    """openai/baselines' schedule: update k of N runs at ``lr * (1 - (k - 1) / N)``. With ``KLAdaptiveLR`` it is
    the schedule's bound that falls: the rate the KL asks for is held under it."""
    annealed = functools.partial(SFPPPO, learning_rate_anneal=True)
    fixed = make_agent(
        make_models("shared-sfp"),
        agent_class=annealed,
        **{**SETTINGS, "learning_rate_scheduler": None, "learning_rate_scheduler_kwargs": {}},
    )
    rollouts, updates = fixed.cfg.rollouts, 4
    for k in range(1, updates + 1):
        fixed._anneal_learning_rate(timestep=k * rollouts - 1, timesteps=updates * rollouts)
        assert fixed.optimizer.param_groups[0]["lr"] == pytest.approx(1e-3 * (1 - (k - 1) / updates))

    adaptive = make_agent(
        make_models("shared-sfp"),
        agent_class=annealed,
        **{
            **SETTINGS,
            "learning_rate": 4e-3,
            "learning_rate_scheduler_kwargs": {"kl_threshold": 0.008, "max_lr": 5e-3},
        },
    )
    for k in range(1, updates + 1):
        adaptive._anneal_learning_rate(timestep=k * rollouts - 1, timesteps=updates * rollouts)
        bound = 5e-3 * (1 - (k - 1) / updates)
        assert adaptive.scheduler.max_lr == pytest.approx(bound)
        before = adaptive.optimizer.param_groups[0]["lr"]
        assert before <= bound
        adaptive.scheduler.step(0.0)  # a small KL asks for 1.5x the rate: granted up to the bound
        assert adaptive.optimizer.param_groups[0]["lr"] == pytest.approx(min(1.5 * before, bound))


def test_episode_tracker_sums_finished_episodes_and_keeps_a_nan_in_its_own_episode():
    from omni_sfp.ppo.agent import EpisodeTracker

    tracker = EpisodeTracker(3, torch.device("cpu"))
    steps = [  # rewards and done flags of 3 envs over 4 steps
        ([1.0, 2.0, float("nan")], [False, True, False]),
        ([1.0, 5.0, 1.0], [True, False, True]),
        ([3.0, 5.0, 1.0], [False, True, False]),
        ([3.0, 1.0, 1.0], [False, False, False]),
    ]
    for rewards, done in steps[:2]:
        tracker.record(torch.tensor(rewards).reshape(3, 1), torch.tensor(done).reshape(3, 1))
    mean_return, mean_length, count = tracker.pop()  # env 2's NaN episode ended: the mean is NaN, as it was
    assert count == 3 and mean_length == 5 / 3 and math.isnan(mean_return)
    for rewards, done in steps[2:]:
        tracker.record(torch.tensor(rewards).reshape(3, 1), torch.tensor(done).reshape(3, 1))
    assert tracker.pop() == (10.0, 2.0, 1)  # env 1's second episode: 5 + 5; no NaN left anywhere
    state = tracker.state_dict()
    assert state["returns"].flatten().tolist() == [6.0, 1.0, 2.0] and state["lengths"].flatten().tolist() == [2, 1, 2]
    other = EpisodeTracker(3, torch.device("cpu"))
    other.load_state_dict({name: tensor.clone() for name, tensor in state.items()})
    other.record(torch.ones(3, 1), torch.ones(3, 1, dtype=torch.bool))
    assert other.pop() == (4.0, 8 / 3, 3)  # the resumed episodes end: returns 7, 2, 3 and lengths 3, 2, 3
