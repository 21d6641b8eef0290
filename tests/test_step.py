"""The minibatch step (omni_sfp/ppo/step.py) eager and captured: one graph without breaks, the same results
within the stated bound, the keyed cache's guarantee inside a traced call, skrl's KL-adaptive rule on the
device, and each case a capture refuses in one line."""

from __future__ import annotations

import copy
import functools

import gymnasium
import pytest
import torch
from ppo_driver import BOX_ACT, BOX_OBS, make_agent, run
from skrl.resources.schedulers.torch import KLAdaptiveLR
from tolerances import FP32_ABSOLUTE, FP32_RELATIVE

from omni_sfp.compute.capture import CaptureError, compile_step
from omni_sfp.ppo.agent import SFPPPO
from omni_sfp.ppo.minibatches import Minibatch
from omni_sfp.ppo.step import DeviceLearningRate
from omni_sfp.run.compose import ConfigError, load_config
from omni_sfp.sfp import models as sfp_models
from omni_sfp.sfp import network
from omni_sfp.sfp.models import SharedActorCritic

SETTINGS = {
    "rollouts": 8,
    "learning_epochs": 1,  # one permutation, drawn before the first step: both sides step the same minibatches
    "mini_batches": 4,
    "learning_rate": 1e-3,
    "learning_rate_scheduler": KLAdaptiveLR,
    "learning_rate_scheduler_kwargs": {"kl_threshold": 0.008},
    "grad_norm_clip": 0.5,
    "value_clip": 0.2,
    "entropy_loss_scale": 0.01,
}


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def shared_model(**kwargs) -> SharedActorCritic:
    torch.manual_seed(7)
    return SharedActorCritic(BOX_OBS, BOX_ACT, "cpu", units=(16, 16), **kwargs)


def fused_agent(model, **settings):
    agent_class = functools.partial(SFPPPO, fused_optimizer=True, bounds_loss_scale=1e-4)
    return make_agent({"policy": model, "value": model}, agent_class=agent_class, **{**SETTINGS, **settings})


def batch_of(agent, size: int = 16) -> Minibatch:
    generator = torch.Generator().manual_seed(5)
    return Minibatch(
        observations=torch.randn(size, BOX_OBS.shape[0], generator=generator),
        states=None,
        actions=torch.randn(size, BOX_ACT.shape[0], generator=generator),
        log_prob=torch.randn(size, 1, generator=generator) - 3,
        values=torch.randn(size, 1, generator=generator),
        returns=torch.randn(size, 1, generator=generator),
        advantages=torch.randn(size, 1, generator=generator),
    )


# -- one graph ---------------------------------------------------------------------------------------------------
def spec_model():
    spec = network.parse(
        {
            "separate": False,
            "policy": {
                "class": "CategoricalMixin",
                "network": [{"name": "net", "input": "OBSERVATIONS", "layers": [32, 32], "activations": "elu"}],
                "output": "ACTIONS",
            },
            "value": {
                "class": "DeterministicMixin",
                "network": [{"name": "net", "input": "OBSERVATIONS", "layers": [32, 32], "activations": "elu"}],
                "output": "ONE",
            },
        }
    )
    torch.manual_seed(7)
    models = sfp_models.build_models(spec, BOX_OBS, gymnasium.spaces.Discrete(3), torch.device("cpu"))
    return models["policy"]


@pytest.mark.parametrize("kind", ["mlp", "spec"])
def test_the_step_is_one_graph_without_breaks_with_one_trunk_in_it(kind):
    model = shared_model() if kind == "mlp" else spec_model()
    agent = make_agent({"policy": model, "value": model}, agent_class=SFPPPO, **SETTINGS)
    batch = batch_of(agent)
    if kind == "spec":
        batch.actions = torch.randint(0, 3, (16, 1))
    explanation = torch._dynamo.explain(agent._step.loss)(batch)
    assert explanation.graph_break_count == 0 and explanation.graph_count == 1, explanation.break_reasons
    linear = [
        n for g in explanation.graphs for n in g.graph.nodes if n.op == "call_function" and "linear" in str(n.target)
    ]
    assert len(linear) == 4  # the trunk's two layers once, then a head per role: the value call was served


# -- captured equals eager ---------------------------------------------------------------------------------------
def test_a_captured_update_equals_the_eager_one_within_the_bound():
    """The bound (docs/reliability.md): a compiled step fuses the elementwise work around the matrix products
    and sums in another order, so its losses and gradients agree with the eager step's within the fp32
    summation-order bound of the tensors' largest components; Adam turns a gradient into a step of size about
    ``lr``, so after ``n`` steps a parameter agrees within ``n * lr`` (a component whose gradient is within the
    bound of 0 may step either way)."""
    results = {}
    for capture in ("off", "compile"):
        agent = fused_agent(shared_model())
        agent.set_capture(capture)
        torch.manual_seed(11)
        run(agent, agent.cfg.rollouts, seed=0)  # one rollout, one update: 1 epoch x 4 minibatches
        results[capture] = agent
    eager, captured = results["off"], results["compile"]
    assert captured.capture == "compile" and captured._checked == {"step"}
    for name in ("policy_loss", "value_loss", "entropy_loss", "kl"):
        a, b = eager.last_losses[name], captured.last_losses[name]
        assert abs(a - b) <= 1e-4 * abs(a) + FP32_ABSOLUTE, (name, a, b)
    steps = eager.last_losses["minibatches"]
    for (name, a), b in zip(eager.policy.named_parameters(), captured.policy.parameters()):
        assert (a - b).abs().max() <= steps * SETTINGS["learning_rate"], name
    assert eager.sfp_stats == captured.sfp_stats and captured.sfp_share_rate == 1.0


def test_the_act_pair_is_captured_with_the_step_and_counts_as_the_eager_one():
    results = {}
    for capture in ("off", "compile"):
        agent = fused_agent(shared_model())
        agent.set_capture(capture)
        torch.manual_seed(11)
        run(agent, 2 * agent.cfg.rollouts, seed=0)  # the second rollout acts through the compiled pair
        results[capture] = agent
    eager, captured = results["off"], results["compile"]
    assert captured._checked == {"act", "step"}
    assert captured.sfp_stats == eager.sfp_stats and captured.sfp_share_rate == 1.0
    assert captured.shareable_calls == eager.shareable_calls
    observations = torch.randn(5, BOX_OBS.shape[0])
    _, outputs = captured.act(observations, None, timestep=0, timesteps=0)  # the compiled pair
    inputs = {"observations": captured._observation_preprocessor(observations)}
    deterministic = captured.policy.act(inputs, role="policy")[1]["mean_actions"]
    assert torch.allclose(outputs["mean_actions"], deterministic, rtol=FP32_RELATIVE, atol=FP32_ABSOLUTE)


def test_a_compiled_minibatch_gives_the_eager_loss_and_gradients_within_the_summation_bound():
    model = shared_model()
    agent = fused_agent(model)
    batch = batch_of(agent)
    grads = {}
    for name, loss_fn in (("eager", agent._step.loss), ("compiled", compile_step(agent._step.loss))):
        model.zero_grad()
        loss, statistics = loss_fn(batch)
        loss.backward()
        grads[name] = (loss.detach(), statistics, [p.grad.clone() for p in model.parameters()])
    (loss_e, stats_e, grads_e), (loss_c, stats_c, grads_c) = grads["eager"], grads["compiled"]
    assert (loss_e - loss_c).abs() <= FP32_RELATIVE * loss_e.abs() + FP32_ABSOLUTE
    assert torch.allclose(stats_e, stats_c, rtol=FP32_RELATIVE, atol=FP32_ABSOLUTE)
    for a, b in zip(grads_e, grads_c):
        assert (a - b).abs().max() <= FP32_RELATIVE * a.abs().max() + FP32_ABSOLUTE


# -- the cache inside a traced call ----------------------------------------------------------------------------
def roles(model, x, order):
    """Both roles on one input, in ``order``; the trunk's graph entry ends with the call, as the step's does."""
    out = {}
    for role in order:
        out[role] = model.act({"observations": x, "taken_actions": torch.zeros(x.shape[0], 2)}, role=role)[0]
    model.trunk.end_graph()
    return out["value"], out.get("policy")


@pytest.mark.parametrize(
    "change",
    ["value first", "autocast bf16", "eval mode", "parameters replaced", "input changed in place"],
)
def test_inside_a_traced_call_every_change_the_key_covers_recompiles_or_misses(change):
    """Each case computes in a compiled function what the uncached model computes (dynamo re-traces on a changed
    mode, the parameters are the graph's inputs, and the in-graph entry is keyed on the traced tensor)."""
    model, twin = shared_model(), shared_model(cache_check="off")
    order = ("value", "policy") if change == "value first" else ("policy", "value")
    x = torch.randn(8, BOX_OBS.shape[0])

    def call(m, x):
        dtype = torch.bfloat16 if change == "autocast bf16" else None
        with torch.autocast("cpu", dtype=dtype or torch.bfloat16, enabled=dtype is not None):
            return roles(m, x, order)[0]

    compiled = torch.compile(call, fullgraph=True)
    compiled(model, x)  # traced once in the default state
    if change == "eval mode":
        model.eval(), twin.eval()
    if change == "parameters replaced":
        with torch.no_grad():
            for module in (model, twin):
                module.value_head.linear.weight = torch.nn.Parameter(torch.ones_like(module.value_head.linear.weight))
    if change == "input changed in place":
        x = x.clone()
        x.mul_(2)
    assert torch.allclose(compiled(model, x).float(), call(twin, x).float(), rtol=1e-2 if "bf16" in change else 1e-5)


# -- skrl's KL-adaptive rule on the device ------------------------------------------------------------------------
def test_the_device_rate_takes_skrls_kl_adaptive_steps_exactly():
    parameter = torch.nn.Parameter(torch.zeros(1))
    host = torch.optim.Adam([parameter], lr=1e-3)
    theirs = KLAdaptiveLR(host, kl_threshold=0.008, min_lr=1e-4, max_lr=2e-3)
    device_optimizer = torch.optim.Adam([torch.nn.Parameter(torch.zeros(1))], lr=1e-3, fused=True)
    schedule = KLAdaptiveLR(device_optimizer, kl_threshold=0.008, min_lr=1e-4, max_lr=2e-3)
    ours = DeviceLearningRate(device_optimizer, schedule, torch.device("cpu"))
    assert device_optimizer.param_groups[0]["lr"] is ours.rate
    kls = [0.001, 0.001, 0.001, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.008, 0.0161, 0.0039, 0.004, 0.05, 1e-6]
    for kl in kls:
        theirs.step(torch.tensor(kl).item())
        ours.adapt(torch.tensor(kl))
        assert ours.rate.item() == host.param_groups[0]["lr"], kl
    theirs.max_lr = schedule.max_lr = 5e-4  # the anneal lowers the bound and holds the rate under it
    host.param_groups[0]["lr"] = min(host.param_groups[0]["lr"], 5e-4)
    ours.set(5e-4, at_most=True)
    for _ in range(4):  # low KLs raise the rate up to the lowered bound, no further
        theirs.step(0.0001)
        ours.adapt(torch.tensor(0.0001))
        assert ours.rate.item() == host.param_groups[0]["lr"]
    assert ours.rate.item() == 5e-4


def test_a_loaded_optimizer_state_is_taken_into_the_device_rate():
    agent = fused_agent(shared_model())
    state = copy.deepcopy(agent.optimizer.state_dict())
    state["param_groups"][0]["lr"] = 7e-4  # a number, as an older checkpoint holds it
    agent.checkpoint_modules["optimizer"].load_state_dict(state)
    agent._device_rate.attach()
    assert agent.optimizer.param_groups[0]["lr"] is agent._device_rate.rate and agent._device_rate.rate.item() == 7e-4


# -- refusals: one line each -------------------------------------------------------------------------------------
def test_a_capture_refuses_hooks_graphs_off_cuda_and_the_kl_early_stop_in_one_line():
    agent = fused_agent(shared_model())
    with pytest.raises(CaptureError, match="^the PPO step cannot be captured: CUDA graphs need a CUDA device"):
        agent.set_capture("graph")
    handle = agent.policy.layers[0].register_forward_hook(lambda *args: None)
    with pytest.raises(CaptureError, match="a module hook is registered"):
        agent.set_capture("compile")
    handle.remove()
    agent.set_capture("compile")
    stopping = fused_agent(shared_model(), kl_threshold=0.01)
    with pytest.raises(CaptureError, match="kl_threshold stops an epoch on a host read"):
        stopping.set_capture("compile")
    with pytest.raises(ConfigError, match="^train.capture=true: train.ppo.kl_threshold=0.01 stops an epoch"):
        load_config(["train.capture=true", "train.ppo.kl_threshold=0.01"])


class DropoutTrunk(SharedActorCritic):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.layers.append(torch.nn.Dropout(0.5))


def test_a_trunk_that_draws_random_numbers_is_not_captured_after_its_eager_step_shows_it():
    torch.manual_seed(7)
    model = DropoutTrunk(BOX_OBS, BOX_ACT, "cpu", units=(16, 16))
    agent = fused_agent(model)
    assert agent.capture_problem() is None  # nothing known before a step ran
    torch.manual_seed(11)
    run(agent, agent.cfg.rollouts, seed=0)
    assert "the trunk drew random numbers" in agent.capture_problem()
    with pytest.raises(CaptureError, match="dropout"):
        agent.set_capture("compile")
