"""SharedActorCritic inside a real skrl PPO: the cache changes nothing but the amount of work."""

import pytest
import torch
from ppo_driver import BOX_ACT, BOX_OBS, make_agent, run

from omni_sfp import SharedActorCritic
from omni_sfp.sfp.models import mlp_models


def shared(cache_check: str) -> SharedActorCritic:
    torch.manual_seed(0)
    return SharedActorCritic(BOX_OBS, BOX_ACT, "cpu", units=(32, 32), cache_check=cache_check)


def train(cache_check: str, **cfg):
    model = shared(cache_check)
    agent = make_agent({"policy": model, "value": model}, **cfg)
    torch.manual_seed(1)  # same sampling of actions and minibatches in both runs
    losses = run(agent, steps=24)
    return model, losses


@pytest.mark.parametrize("time_limit_bootstrap", [False, True])
@pytest.mark.parametrize("mixed_precision", [False, True])
def test_ppo_with_cache_equals_double_pass(mixed_precision, time_limit_bootstrap):
    cfg = dict(mixed_precision=mixed_precision, time_limit_bootstrap=time_limit_bootstrap)
    cached, cached_losses = train("auto", **cfg)
    double, double_losses = train("off", **cfg)
    assert len(cached_losses) == 3  # one mean policy loss per update
    tolerance = dict(rtol=2e-2, atol=2e-3) if mixed_precision else dict(rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(torch.tensor(cached_losses), torch.tensor(double_losses), **tolerance)
    for (name, a), (_, b) in zip(cached.named_parameters(), double.named_parameters()):
        torch.testing.assert_close(a, b, **tolerance, msg=name)
    assert double.sfp_stats.hits == 0


def test_cache_hits_every_shareable_call_in_ppo():
    """Shareable: the value call of each rollout step and of each minibatch (last_values is alone)."""
    model, _ = train("auto")
    steps, minibatches = 24, 3 * 2 * 2
    stats = model.sfp_stats
    assert stats.hits >= 0.95 * (steps + minibatches)
    assert stats.misses == steps + minibatches + 3  # + one last_values call per update
    assert stats.bypasses == 0


def test_bootstrap_calls_are_served_too():
    """With time-limit bootstrap, the lone value call on the next observations feeds the next step."""
    model, _ = train("auto", time_limit_bootstrap=True)
    plain, _ = train("auto", time_limit_bootstrap=False)
    # every 5th step truncates: its bootstrap call computes, the next step's policy and value are served
    assert model.sfp_stats.misses <= plain.sfp_stats.misses + 1
    assert model.sfp_stats.hits > plain.sfp_stats.hits


def test_act_roles():
    model = shared("auto")
    obs = torch.randn(4, 6)
    actions, outputs = model.act({"observations": obs}, role="policy")
    assert actions.shape == (4, 2) and set(outputs) >= {"log_prob", "mean_actions", "log_std"}
    features = model.trunk.trunk(obs)
    assert torch.equal(outputs["mean_actions"], model.policy_head(features))
    distribution = torch.distributions.Normal(outputs["mean_actions"], outputs["log_std"].exp())
    torch.testing.assert_close(outputs["log_prob"], distribution.log_prob(actions).sum(-1, keepdim=True))
    values, _ = model.act({"observations": obs}, role="value")
    assert torch.equal(values, model.value_head(features)) and values.shape == (4, 1)
    with pytest.raises(ValueError, match="role"):
        model.act({"observations": obs}, role="critic")


def test_separate_models_train_in_ppo():
    torch.manual_seed(0)
    models = mlp_models(BOX_OBS, BOX_ACT, "cpu", units=(16,), separate=True)
    policy, value = models["policy"], models["value"]
    before = [p.clone() for p in policy.parameters()]
    losses = run(make_agent({"policy": policy, "value": value}), steps=8)
    assert len(losses) == 1 and all(torch.isfinite(torch.tensor(losses)))
    assert any(not torch.equal(a, b) for a, b in zip(before, policy.parameters()))


def _old_names(state: dict, role: str | None) -> dict:
    """``state`` under the names omni-sfp's MLP models had before the MLP became a spec: ``SharedActorCritic``'s
    ``trunk.trunk.<i>``, ``policy_head``, ``value_head`` (``role=None``); a separate model's ``net.0.<i>``, ``net.1``."""
    old = {}
    for key, value in state.items():
        if role is None and key.startswith("value_trunk."):
            continue  # the same tensors as the policy's: one trunk under one name
        key = key.replace("policy_trunk.trunk.net.blocks.net.", "trunk.trunk.")
        key = key.replace(f"{role}_trunk.net.blocks.net.", "net.0.").replace(f"{role}_head.linear.", "net.1.")
        old[key.replace("_head.linear.", "_head.")] = value
    return old


@pytest.mark.parametrize("separate", [False, True])
def test_a_checkpoint_of_the_mlp_before_it_became_a_spec_loads(separate):
    torch.manual_seed(0)
    saved = mlp_models(BOX_OBS, BOX_ACT, "cpu", units=(16, 8), separate=separate)
    torch.manual_seed(1)
    fresh = mlp_models(BOX_OBS, BOX_ACT, "cpu", units=(16, 8), separate=separate)
    obs = {"observations": torch.randn(5, 6)}
    for role in ("policy", "value"):
        state = _old_names(saved[role].state_dict(), role if separate else None)
        assert not any("blocks" in key or "linear" in key for key in state)
        fresh[role].load_state_dict(state)  # strict: every name is found
        with torch.no_grad():
            expected, expected_outputs = saved[role].act(obs, role=role)
            actual, actual_outputs = fresh[role].act(obs, role=role)
        if role == "policy":
            expected, actual = expected_outputs["mean_actions"], actual_outputs["mean_actions"]
        assert torch.equal(actual, expected)
        for (name, a), (_, b) in zip(fresh[role].named_parameters(), saved[role].named_parameters()):
            assert torch.equal(a, b), name
    if not separate:  # one trunk: both roles' names hold the same tensors after loading
        assert fresh["policy"].policy_trunk.trunk is fresh["policy"].value_trunk.trunk


def test_bad_layer_spec_is_refused():
    with pytest.raises(ValueError, match="activation='swishy'"):
        SharedActorCritic(BOX_OBS, BOX_ACT, "cpu", activation="swishy")
    with pytest.raises(ValueError, match="units"):
        SharedActorCritic(BOX_OBS, BOX_ACT, "cpu", units=[])


def shared_mlp(*args, **kwargs):
    return SharedActorCritic(*args, **kwargs)


def separate_policy(*args, **kwargs):
    return mlp_models(*args, **kwargs, separate=True)["policy"]


def separate_value(observation_space, action_space, device, *, units=(256, 128, 64), init="orthogonal"):
    """The separate value model alone (mlp_models builds the policy first, which draws from the same seed)."""
    from omni_sfp.sfp import network

    spec = network.parse(network.mlp_spec(units, separate=True))
    return network.SpecValue(spec, observation_space, action_space, device, init=init)


@pytest.mark.parametrize("cls", [shared_mlp, separate_policy, separate_value])
def test_init_torch_is_nn_linears_default_and_orthogonal_is_orthogonal(cls):
    """``init="torch"`` keeps nn.Linear's own draw (what skrl's instantiators and rl_games' default initializer
    train with: the same seed gives the same weights as plain nn.Linear layers); ``"orthogonal"`` gives
    orthogonal hidden layers of gain sqrt(2) and zero biases."""
    torch.manual_seed(3)
    model = cls(BOX_OBS, BOX_ACT, "cpu", units=(16, 8), init="torch")
    torch.manual_seed(3)
    plain = [torch.nn.Linear(6, 16), torch.nn.Linear(16, 8)]
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    for ours, theirs in zip(linears, plain):
        assert torch.equal(ours.weight, theirs.weight) and torch.equal(ours.bias, theirs.bias)
    model = cls(BOX_OBS, BOX_ACT, "cpu", units=(16, 8), init="orthogonal")
    first = [m for m in model.modules() if isinstance(m, torch.nn.Linear)][0]
    gram = first.weight.T @ first.weight  # 6 orthogonal columns of norm sqrt(2)
    assert torch.allclose(gram, 2 * torch.eye(6), atol=1e-5) and not first.bias.any()
    torch.manual_seed(3)
    model = cls(BOX_OBS, BOX_ACT, "cpu", units=(16, 8), init="torch_zero_bias")
    first = [m for m in model.modules() if isinstance(m, torch.nn.Linear)][0]
    assert torch.equal(first.weight, plain[0].weight) and not first.bias.any()
    with pytest.raises(ValueError, match="init='xavier'"):
        cls(BOX_OBS, BOX_ACT, "cpu", init="xavier")


@pytest.fixture
def fast_elu_kernels():
    """omni_sfp's ELU kernel on both paths (process-wide, as omni_sfp.compute.cpu_choices sets it), then as it was."""
    from omni_sfp.compute.kernels import elu_kernels, use_elu_kernels

    before = elu_kernels()
    use_elu_kernels(no_grad="fast", autograd="fast")
    yield
    use_elu_kernels(**before)


def test_elu_is_within_its_bound_of_torchs_with_and_without_autograd(fast_elu_kernels):
    import math

    import torch.nn.functional as F

    from omni_sfp.compute.kernels import ELU

    elu = ELU()
    grid = torch.cat([torch.linspace(-40.0, 5.0, 1_000_001), -torch.logspace(-38, 1, 10_001)])
    special = torch.tensor([math.nan, -math.inf, math.inf, 0.0, -0.0, -1e-45, 7.5])
    with torch.no_grad():
        fast, exact = elu(grid), F.elu(grid)
        assert not torch.equal(fast, exact)  # the fast path ran
        assert (fast - exact).abs().max() <= 2**-23  # the bound the docstring derives
        assert torch.equal(elu(grid.clamp(min=0)), grid.clamp(min=0))  # positives pass through exactly
        got = elu(special)
        assert torch.isnan(got[0]) and torch.allclose(got[1:], F.elu(special[1:]), rtol=0, atol=2**-23)  # -1, inf, ...
    # with autograd: the same forward, and torch's ELU backward from the output (dy/dx = y + 1 for x <= 0)
    leaf = grid.clone().requires_grad_()
    out = elu(leaf)
    assert torch.equal(out.detach(), fast)
    upstream = torch.linspace(-2.0, 2.0, grid.numel())
    (out * upstream).sum().backward()
    expected = torch.autograd.grad((F.elu(leaf) * upstream).sum(), leaf)[0]
    assert (leaf.grad - expected).abs().max() <= 2 * 2**-23  # |upstream| <= 2 times the forward's bound
    from torch.func import grad

    assert torch.equal(grad(lambda x: (elu(x) * upstream).sum())(grid), leaf.grad)  # torch.func transforms too
    with torch.no_grad():  # torch's ELU elsewhere: another alpha or dtype, and in TorchScript (the export)
        assert torch.equal(ELU(alpha=0.5)(grid), F.elu(grid, alpha=0.5))
        assert torch.equal(elu(grid.double()), F.elu(grid.double()))
        assert torch.equal(torch.jit.script(ELU())(grid), exact)


def test_an_in_place_elu_writes_over_its_input_with_each_kernel_on_each_path():
    """Values equal to the out-of-place ELU's (but for the sign of a zero); the gradient is torch's ELU backward
    from the output: the fast kernel's exactly, and for torch's kernel ``y + 1`` in place of ``exp(x)``, within
    an ulp of each (2**-24 on the grid's results in (-1, 0]) times ``|upstream| <= 2``."""
    import torch.nn.functional as F

    from omni_sfp.compute.kernels import ELU, elu_kernels, use_elu_kernels

    before = elu_kernels()
    grid = torch.cat([torch.linspace(-40.0, 5.0, 100_001), -torch.logspace(-38, 1, 1_001)])
    upstream = torch.linspace(-2.0, 2.0, grid.numel())

    def through(elu: ELU) -> tuple[torch.Tensor, torch.Tensor, bool]:
        """Output, input gradient, and whether the output is the layer output's own memory."""
        leaf = grid.clone().requires_grad_()
        layer_output = leaf * 1.0  # a layer's output: not a leaf, nothing else reads it
        out = elu(layer_output)
        return (
            out.detach(),
            torch.autograd.grad((out * upstream).sum(), leaf)[0],
            out.data_ptr() == layer_output.data_ptr(),
        )

    try:
        for kernel in ("torch", "fast"):
            use_elu_kernels(no_grad=kernel, autograd=kernel)
            with torch.no_grad():
                x = grid.clone()
                got = ELU(inplace=True)(x)
                assert got.data_ptr() == x.data_ptr() and torch.equal(got + 0.0, ELU()(grid) + 0.0), kernel
                untouched = grid.clone()
                ELU()(untouched)
                assert torch.equal(untouched, grid), kernel  # without inplace the input stays as it was
            out_of_place, reference, shared = through(ELU())
            in_place, gradient, written_over = through(ELU(inplace=True))
            assert written_over and not shared and torch.equal(in_place + 0.0, out_of_place + 0.0), kernel
            if kernel == "fast":
                assert torch.equal(gradient, reference)
            else:
                assert not torch.equal(gradient, reference)  # the premise: another formula
                assert (gradient - reference).abs().max() <= 2 * 2**-24
                assert torch.equal(out_of_place, F.elu(grid))
    finally:
        use_elu_kernels(**before)


def test_the_mlp_trunk_keeps_one_activation_per_layer_for_the_backward(monkeypatch):
    """Its ELUs act in place on their Linear's output: autograd keeps each layer's output once (the ELU's result,
    which the next Linear reads too) instead of the Linear's output and the ELU's. Same values and gradients.
    Measured with torch's kernel, whose out-of-place backward keeps its input (the process-wide choice may be the
    fast kernel, left by an earlier run on a CPU whose probe picked it; that one keeps only its output anyway)."""
    import copy

    from omni_sfp.compute import kernels
    from omni_sfp.compute.kernels import ELU
    from omni_sfp.sfp.network import make_mlp

    monkeypatch.setattr(kernels, "_elu_kernels", {"no_grad": "torch", "autograd": "torch"})

    torch.manual_seed(0)
    trunk, x = make_mlp(6, (64, 32)), torch.randn(128, 6)
    elus = [m for m in trunk if isinstance(m, ELU)]
    assert len(elus) == 2 and all(m.inplace for m in elus)
    plain = copy.deepcopy(trunk)
    for module in plain:
        if isinstance(module, ELU):
            module.inplace = False

    def kept(module: torch.nn.Module) -> tuple[int, torch.Tensor, list[torch.Tensor]]:
        storages = {}

        def pack(tensor: torch.Tensor) -> torch.Tensor:
            storages[tensor.untyped_storage().data_ptr()] = tensor.untyped_storage().nbytes()
            return tensor

        module.zero_grad(set_to_none=True)
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
            out = module(x)
        out.square().sum().backward()
        return sum(storages.values()), out.detach(), [p.grad for p in module.parameters()]

    in_place_bytes, in_place_out, in_place_grads = kept(trunk)
    plain_bytes, plain_out, plain_grads = kept(plain)
    assert plain_bytes - in_place_bytes == 128 * 64 * 4  # the first Linear's output, no longer kept apart
    assert torch.equal(in_place_out, plain_out)
    for ours, theirs in zip(in_place_grads, plain_grads):
        assert (ours - theirs).abs().max() <= 1e-5 * theirs.abs().max()


def test_the_network_builders_elus_write_over_their_layers_outputs_never_over_the_inputs():
    """Activations follow linear and convolution layers only (flatten takes none): each ELU acts in place."""
    from gymnasium import spaces

    from omni_sfp.compute.kernels import ELU
    from omni_sfp.sfp import network
    from omni_sfp.sfp.models import build_models

    trunk = [
        {"name": "features", "input": "OBSERVATIONS", "layers": [{"conv2d": [4, 2]}, "flatten"], "activations": "elu"},
        {"name": "net", "input": "features", "layers": [16, 8], "activations": "elu"},
    ]
    models = {
        "separate": False,
        "policy": {"class": "GaussianMixin", "network": trunk, "output": "ACTIONS"},
        "value": {"class": "DeterministicMixin", "network": trunk, "output": "ONE"},
    }
    obs = spaces.Box(-1, 1, (2, 5, 5))
    model = build_models(network.parse(models), obs, spaces.Box(-1, 1, (2,)), torch.device("cpu"))["policy"]
    elus = [m for m in model.modules() if isinstance(m, ELU)]
    assert len(elus) == 3 and all(m.inplace for m in elus)
    x = torch.randn(4, 2, 5, 5) - 1.0  # mostly negative: an ELU written over them would change them
    seen = x.clone()
    with torch.no_grad():
        model.compute({"observations": x}, role="policy")
    model.compute({"observations": x}, role="value")[0].sum().backward()
    assert torch.equal(x, seen)


def test_elu_takes_the_kernel_chosen_for_each_path():
    import torch.nn.functional as F

    from omni_sfp.compute.kernels import ELU, elu_kernels, fast_elu, use_elu_kernels

    before, grid = elu_kernels(), torch.linspace(-20.0, 2.0, 100_001)
    try:
        for no_grad, autograd in (("torch", "fast"), ("fast", "torch")):
            use_elu_kernels(no_grad=no_grad, autograd=autograd)
            with torch.no_grad():
                assert torch.equal(ELU()(grid), fast_elu(grid) if no_grad == "fast" else F.elu(grid))
            with_grad = ELU()(grid.clone().requires_grad_()).detach()
            assert torch.equal(with_grad, fast_elu(grid) if autograd == "fast" else F.elu(grid))
        assert not torch.equal(fast_elu(grid), F.elu(grid))  # the premise: the two kernels differ on this grid
        with pytest.raises(ValueError, match="ELU kernel autograd='exp' is not one of torch, fast"):
            use_elu_kernels(no_grad="torch", autograd="exp")
    finally:
        use_elu_kernels(**before)
