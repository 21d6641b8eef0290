"""The single-forward-pass cache, one test per hazard: every hit must leave the caller's result unchanged."""

import gc
import weakref

import gymnasium
import pytest
import torch
from tolerances import assert_summation_order_close
from torch import nn

from omni_sfp import SharedActorCritic, SingleForwardPass
from omni_sfp.sfp.network import make_mlp

OBS, ACT = 6, 2


def make_model(cache_check="auto", **kwargs) -> SharedActorCritic:
    torch.manual_seed(0)
    box = gymnasium.spaces.Box
    return SharedActorCritic(
        box(-1, 1, (OBS,)), box(-1, 1, (ACT,)), "cpu", units=(32, 16), cache_check=cache_check, **kwargs
    )


def uncached_trunk(model: SharedActorCritic, x: torch.Tensor) -> torch.Tensor:
    """The reference: the wrapped trunk itself, bypassing the cache."""
    return model.trunk.trunk(x)


def value(model, x):
    return model.act({"observations": x}, role="value")[0]


def policy_mean(model, x):
    return model.act({"observations": x}, role="policy")[1]["mean_actions"]


def stats(model):
    s = model.sfp_stats
    return s.hits, s.misses, s.bypasses


def test_policy_then_value_on_same_input_hits_and_matches():
    model = make_model()
    x = torch.randn(5, OBS)
    with torch.no_grad():
        mean = policy_mean(model, x)
        v = value(model, x)
        features = uncached_trunk(model, x)
    assert torch.equal(mean, model.policy_head(features))
    assert torch.equal(v, model.value_head(features))
    assert stats(model) == (1, 1, 0)


def test_value_before_policy_is_served_the_same_way():
    """skrl's built-in cache depends on which role comes first; this one must not."""
    model = make_model()
    x = torch.randn(5, OBS)
    with torch.no_grad():
        v = value(model, x)
        mean = policy_mean(model, x)
        features = uncached_trunk(model, x)
    assert torch.equal(v, model.value_head(features))
    assert torch.equal(mean, model.policy_head(features))
    assert stats(model) == (1, 1, 0)


def test_first_call_of_a_fresh_model_can_be_value():
    model = make_model()
    x = torch.randn(3, OBS)
    with torch.no_grad():
        first = value(model, x)  # the value role computes and stores the trunk; the policy then reuses it
        assert torch.equal(first, model.value_head(uncached_trunk(model, x)))
        assert torch.equal(policy_mean(model, x), model.policy_head(uncached_trunk(model, x)))
    assert stats(model) == (1, 1, 0)


def test_value_on_different_bootstrap_observations_is_recomputed():
    model = make_model()
    x, next_x = torch.randn(5, OBS), torch.randn(5, OBS)
    with torch.no_grad():
        policy_mean(model, x)
        v = value(model, next_x)
        assert torch.equal(v, model.value_head(uncached_trunk(model, next_x)))
    assert stats(model) == (0, 2, 0)


def test_kl_early_stop_between_the_calls_leaves_nothing_stale():
    """PPO's KL early stop breaks after the policy call: the next value call comes after an optimizer step."""
    model = make_model()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    x = torch.randn(5, OBS)
    policy_mean(model, x).sum().backward()
    optimizer.step()
    v = value(model, x)
    assert torch.equal(v, model.value_head(uncached_trunk(model, x)))
    assert stats(model) == (0, 2, 0)


def test_mode_switch_after_an_early_stop_frees_the_graph():
    model = make_model()
    features = model.trunk(torch.randn(5, OBS))
    assert features.grad_fn is not None
    alive = weakref.ref(features)  # the output owns its graph: the graph lives exactly as long as it does
    del features
    gc.collect()
    assert alive() is not None, "the cache holds the entry until the next call or mode change"
    model.train(False)  # what skrl does right after update(), early stop or not
    gc.collect()
    assert alive() is None


def test_grad_entry_is_used_once_and_then_released():
    model = make_model()
    x = torch.randn(5, OBS)
    first = model.trunk(x)
    second = model.trunk(x)
    assert second is first
    alive = weakref.ref(first)
    del first, second
    gc.collect()
    assert alive() is None, "a served grad entry must not keep its graph alive"
    third = model.trunk(x)
    assert stats(model) == (1, 2, 0)
    assert third.grad_fn is not None


def test_observation_buffer_written_in_place_between_calls():
    model = make_model()
    obs = torch.randn(5, OBS)
    with torch.no_grad():
        policy_mean(model, obs)
        obs[:] = torch.randn(5, OBS)  # the env writes its buffer in place, as OmniIsaacGymEnvs tasks do
        v = value(model, obs)
        assert torch.equal(v, model.value_head(uncached_trunk(model, obs)))
    assert stats(model) == (0, 2, 0)


def test_in_place_change_of_the_cached_reference_defeats_a_content_match():
    model = make_model("content")
    obs = torch.randn(5, OBS)
    same_as_new = torch.randn(5, OBS)
    with torch.no_grad():
        model.trunk(obs)
        obs.copy_(same_as_new)  # the cached output was computed from the old content
        out = model.trunk(same_as_new.clone())
        assert torch.equal(out, uncached_trunk(model, same_as_new))
    assert stats(model) == (0, 2, 0)


def test_no_grad_rollout_output_is_never_reused_by_a_grad_call():
    model = make_model()
    x = torch.randn(5, OBS)
    with torch.no_grad():
        policy_mean(model, x)
    v = value(model, x)
    assert v.requires_grad
    v.sum().backward()
    assert model.layers[0].weight.grad is not None
    assert stats(model) == (0, 2, 0)


def test_grad_output_is_not_served_to_a_no_grad_call():
    model = make_model()
    x = torch.randn(5, OBS)
    policy_mean(model, x)
    with torch.no_grad():
        assert not value(model, x).requires_grad
    assert stats(model) == (0, 2, 0)


def test_eval_train_switch_invalidates():
    model = make_model()
    x = torch.randn(5, OBS)
    model.train(False)
    with torch.no_grad():
        policy_mean(model, x)
        model.train(True)
        value(model, x)
    assert stats(model) == (0, 2, 0)


def test_optimizer_step_invalidates_for_every_optimizer_implementation():
    for foreach in (False, True):
        model = make_model()
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-2, foreach=foreach)
        x = torch.randn(5, OBS)
        (policy_mean(model, x).sum() + value(model, x).sum()).backward()
        optimizer.step()
        with torch.no_grad():
            v = value(model, x)
            assert torch.equal(v, model.value_head(uncached_trunk(model, x)))
        assert stats(model) == (1, 2, 0), f"foreach={foreach}"


def test_load_state_dict_and_in_place_parameter_edit_invalidate():
    model = make_model()
    other = make_model()
    with torch.no_grad():
        for p in other.parameters():
            p.add_(0.1)
    x = torch.randn(5, OBS)
    with torch.no_grad():
        policy_mean(model, x)
        model.load_state_dict(other.state_dict())
        assert torch.equal(value(model, x), model.value_head(uncached_trunk(model, x)))
        model.layers[0].bias.mul_(2.0)
        assert torch.equal(value(model, x), model.value_head(uncached_trunk(model, x)))
    assert stats(model) == (0, 3, 0)


def test_autocast_toggled_between_calls():
    model = make_model()
    x = torch.randn(5, OBS)
    with torch.no_grad():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            policy_mean(model, x)
        v = value(model, x)
    assert v.dtype == torch.float32
    with torch.no_grad():
        assert torch.equal(v, model.value_head(uncached_trunk(model, x)))
    assert stats(model) == (0, 2, 0)


def test_autocast_dtype_is_part_of_the_key():
    model = make_model()
    x = torch.randn(5, OBS)
    with torch.no_grad():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            model.trunk(x)
        with torch.autocast("cpu", dtype=torch.float16):
            out = model.trunk(x)
    assert out.dtype == torch.float16
    assert stats(model) == (0, 2, 0)


@pytest.mark.parametrize("mode, hit", [("identity", False), ("content", True), ("auto", True)])
def test_equal_but_new_tensor_hits_only_with_a_content_check(mode, hit):
    model = make_model(mode)
    x = torch.randn(5, OBS)
    with torch.no_grad():
        policy_mean(model, x)
        v = value(model, x.clone())
        assert torch.equal(v, model.value_head(uncached_trunk(model, x)))
    assert stats(model) == ((1, 1, 0) if hit else (0, 2, 0))


@pytest.mark.parametrize("mode", ["identity", "content", "auto"])
def test_inference_mode_tensors_do_not_crash_and_stay_correct(mode):
    model = make_model(mode)
    with torch.inference_mode():
        x = torch.randn(5, OBS)
        policy_mean(model, x)
        v = value(model, x)
        assert torch.equal(v, model.value_head(uncached_trunk(model, x)))
        x.add_(1.0)  # inference tensors change in place without a version counter
        v2 = value(model, x)
        assert torch.equal(v2, model.value_head(uncached_trunk(model, x)))
    hits = model.sfp_stats.hits
    assert hits == (0 if mode == "identity" else 1)


def test_recurrent_trunk_is_refused_with_a_clear_error():
    with pytest.raises(TypeError, match="recurrent"):
        SingleForwardPass(nn.Sequential(nn.Linear(4, 8), nn.LSTM(8, 8)))


def test_unknown_cache_check_is_refused():
    with pytest.raises(ValueError, match="cache_check='sometimes'"):
        SingleForwardPass(nn.Linear(2, 2), cache_check="sometimes")


def test_off_is_the_double_pass_baseline():
    model = make_model("off")
    x = torch.randn(5, OBS)
    with torch.no_grad():
        policy_mean(model, x)
        value(model, x)
    assert stats(model) == (0, 0, 2)


def test_single_forward_pass_false_means_off():
    model = make_model(single_forward_pass=False)
    assert model.trunk.cache_check == "off"


def test_stochastic_trunk_in_training_mode_is_bypassed():
    sfp = SingleForwardPass(nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.5)))
    x = torch.randn(3, 4)
    sfp(x), sfp(x)
    assert (sfp.stats.hits, sfp.stats.bypasses) == (0, 2)
    sfp.eval()
    with torch.no_grad():
        sfp(x), sfp(x)
    assert sfp.stats.hits == 1


def test_output_modified_in_place_is_not_served():
    sfp = SingleForwardPass(nn.Linear(4, 4))
    x = torch.randn(3, 4)
    with torch.no_grad():
        sfp(x).mul_(0.0)
        out = sfp(x)
        assert torch.equal(out, sfp.trunk(x))
    assert sfp.stats.hits == 0


def test_bootstrap_value_is_reused_by_the_next_policy_and_value_calls():
    """skrl's time-limit bootstrap calls value alone on the next observations; the next step's act()
    calls policy and value on the same content (a fresh tensor from the preprocessor)."""
    model = make_model()
    next_obs = torch.randn(5, OBS)
    with torch.no_grad():
        value(model, next_obs)  # record_transition's bootstrap
        step_inputs = next_obs.clone()  # act(): preprocessed again, a new tensor
        mean = policy_mean(model, step_inputs)
        v = value(model, step_inputs)
        features = uncached_trunk(model, next_obs)
    assert torch.equal(mean, model.policy_head(features))
    assert torch.equal(v, model.value_head(features))
    assert stats(model) == (2, 1, 0)


def test_a_served_entry_is_not_content_compared_again():
    """After a pair is complete, the next (new) input is decided by identity alone: no tensor is read."""
    sfp = SingleForwardPass(nn.Linear(4, 4))
    x = torch.randn(3, 4)
    with torch.no_grad():
        sfp(x), sfp(x)
        calls = []
        original_equal = torch.equal
        torch.equal = lambda a, b: calls.append(1) or original_equal(a, b)
        try:
            sfp(x.clone())
        finally:
            torch.equal = original_equal
    assert calls == []
    assert sfp.stats.misses == 2


def test_gradients_match_the_double_pass():
    """Equal up to the order of summation at the trunk output (README): the bound of
    :mod:`tolerances`, scaled by the largest component, not per element (a
    small component that is a sum of cancelling terms differs by more than its own ulps on some CPUs)."""
    cached, double = make_model("auto"), make_model("off")
    x = torch.randn(7, OBS)
    for model in (cached, double):
        loss = policy_mean(model, x).pow(2).sum() + value(model, x).pow(2).sum()
        loss.backward()
    for (name, a), (_, b) in zip(cached.named_parameters(), double.named_parameters()):
        assert_summation_order_close(a.grad, b.grad, name=name)
    assert cached.sfp_stats.hits == 1 and double.sfp_stats.hits == 0


def test_single_forward_pass_wraps_a_users_own_trunk():
    trunk = make_mlp(4, [8, 8])
    sfp = SingleForwardPass(trunk)
    x = torch.randn(2, 4)
    with torch.no_grad():
        first, second = sfp(x), sfp(x)
        assert torch.equal(first, trunk(x))
    assert second is first
    assert (sfp.stats.hits, sfp.stats.misses) == (1, 1)
    sfp.reset_stats()
    assert sfp.stats.calls == 0


# -- issue 11: every way a parameter, an input or randomness can change without a trace ------------------------
# Each test runs the same calls on the cache and on its uncached twin (the bare trunk, or cache_check="off").


def sfp_mlp(cache_check="auto") -> SingleForwardPass:
    torch.manual_seed(0)
    return SingleForwardPass(make_mlp(OBS, [16, 16]), cache_check)


@pytest.mark.parametrize("kind", [torch.optim.Adam, torch.optim.AdamW, torch.optim.SGD])
def test_fused_optimizer_step_invalidates_although_no_version_moves(kind):
    """Fused optimizers write the parameters without bumping ``_version``; fused Adam is our default."""
    sfp = sfp_mlp()
    optimizer = kind(sfp.parameters(), lr=0.1, fused=True)
    x = torch.randn(5, OBS)
    with torch.no_grad():
        sfp(x)
    for p in sfp.parameters():
        p.grad = torch.ones_like(p)
    versions = [p._version for p in sfp.parameters()]
    optimizer.step()
    assert [p._version for p in sfp.parameters()] == versions, "the premise: the fused step leaves no version trace"
    with torch.no_grad():
        assert torch.equal(sfp(x), sfp.trunk(x))
    assert (sfp.stats.hits, sfp.stats.misses) == (0, 2)


def test_ppo_does_not_rely_on_mode_switches():
    """skrl toggles train/eval around every update, which used to be what dropped the entry; the optimizer
    step alone must do it: an entry computed before a (fused) step is never served after it."""
    model = make_model()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2, fused=True)
    x, batch = torch.randn(5, OBS), torch.randn(5, OBS)
    loss = policy_mean(model, batch).sum() + value(model, batch).sum()
    with torch.no_grad():
        value(model, x)  # a graph-free entry made before the step (last_values, a bootstrap call)
    loss.backward()
    optimizer.step()
    with torch.no_grad():  # no mode switch in between
        assert torch.equal(value(model, x), model.value_head(uncached_trunk(model, x)))


def test_skrl_target_update_through_data_clears_the_cache():
    """``Model.update_parameters`` (target networks) writes ``.data``: invisible to versions, so the model
    clears its cache itself."""
    target, source = make_model(), make_model()
    with torch.no_grad():
        for p in source.parameters():
            p.add_(0.5)
    x = torch.randn(5, OBS)
    with torch.no_grad():
        value(target, x)
        target.update_parameters(source, polyak=0.5)
        assert torch.equal(value(target, x), target.value_head(uncached_trunk(target, x)))
    assert target.sfp_stats.hits == 0


def test_clear_caches_and_invalidate_all_caches_drop_entries():
    from omni_sfp.sfp.cache import clear_caches, invalidate_all_caches

    model = make_model()
    x = torch.randn(5, OBS)
    with torch.no_grad():
        value(model, x)
        model.layers[0].weight.data.mul_(2.0)  # a .data write: no version counter sees it
        assert clear_caches(model) == 1
        assert torch.equal(value(model, x), model.value_head(uncached_trunk(model, x)))
        model.layers[0].weight.data.mul_(2.0)
        invalidate_all_caches()
        assert torch.equal(value(model, x), model.value_head(uncached_trunk(model, x)))
        value(model, x)  # nothing changed since: served
    assert stats(model) == (1, 3, 0)


def test_functional_call_with_fresh_parameters_never_hits_a_freed_address():
    """Fresh parameter sets under no_grad reuse freed memory at version 0 (glibc hands a freed 24 KB block
    straight back; stale hits in about 1 of 10 tries in a script, fewer under pytest with the old (address, version) key): identity, not
    address, is the key."""
    torch.manual_seed(0)
    sfp = SingleForwardPass(make_mlp(OBS, [1024]))
    x = torch.randn(5, OBS)
    with torch.no_grad():
        for _ in range(200):
            params = {name: torch.randn_like(p) for name, p in sfp.named_parameters()}
            expected = torch.func.functional_call(
                sfp.trunk, {k.removeprefix("trunk."): v for k, v in params.items()}, (x,)
            )
            assert torch.equal(torch.func.functional_call(sfp, params, (x,)), expected)
            del params, expected
        params = {name: torch.randn_like(p) for name, p in sfp.named_parameters()}
        torch.func.functional_call(sfp, params, (x,))
        torch.func.functional_call(sfp, params, (x,))  # the same parameter set: served
    assert sfp.stats.hits == 1


def test_detached_input_is_not_served_the_graph_of_the_attached_one():
    """``h`` and ``h.detach()`` have equal content; an upstream encoder must get gradients from ``h`` only."""
    grads = []
    for cache_check in ("auto", "off"):
        torch.manual_seed(0)
        encoder, sfp = nn.Linear(OBS, OBS), SingleForwardPass(make_mlp(OBS, [8]), cache_check)
        h = encoder(torch.randn(5, OBS))
        loss = sfp(h).sum() + 2 * sfp(h.detach()).sum()
        loss.backward()
        grads.append([encoder.weight.grad, *[p.grad for p in sfp.parameters()]])
    for a, b in zip(*grads):
        assert_summation_order_close(a, b)


def test_gradient_penalty_inputs_get_their_own_graph():
    """``x.detach().requires_grad_()`` twice: each leaf must be in its own output's graph."""
    sfp = sfp_mlp()
    x = torch.randn(5, OBS)
    first, second = x.detach().requires_grad_(), x.detach().requires_grad_()
    out_first, out_second = sfp(first), sfp(second)
    (g_second,) = torch.autograd.grad(out_second.sum(), second)
    (g_first,) = torch.autograd.grad(out_first.sum(), first)
    reference = x.detach().requires_grad_()
    (expected,) = torch.autograd.grad(sfp.trunk(reference).sum(), reference)
    assert torch.equal(g_first, expected) and torch.equal(g_second, expected)
    assert sfp.stats.hits == 0


def test_torch_func_transforms_run_the_trunk_as_written():
    """grad, vmap, jacrev and forward-mode AD: wrapped tensors and tangents are in no key; the cache steps aside
    (it used to serve a tangent-free entry to a dual input, and crash on wrapped parameters and batched inputs)."""
    import torch.autograd.forward_ad as fwAD

    sfp = sfp_mlp()
    x, tangent = torch.randn(5, OBS), torch.randn(5, OBS)
    with torch.no_grad():
        sfp(x)  # an entry a dual input matches by content
        with fwAD.dual_level():
            got = fwAD.unpack_dual(sfp(fwAD.make_dual(x.clone(), tangent))).tangent
            expected = fwAD.unpack_dual(sfp.trunk(fwAD.make_dual(x.clone(), tangent))).tangent
    assert got is not None and torch.equal(got, expected)
    params = {name: p.detach() for name, p in sfp.named_parameters()}
    bare = {name.removeprefix("trunk."): p for name, p in params.items()}
    got = torch.func.grad(lambda q: torch.func.functional_call(sfp, q, (x,)).sum())(params)
    expected = torch.func.grad(lambda q: torch.func.functional_call(sfp.trunk, q, (x,)).sum())(bare)
    assert all(torch.equal(got[name], expected[name.removeprefix("trunk.")]) for name in got)
    sfp(x[0].clone())  # an entry with the per-sample layout of the vmapped calls
    assert torch.equal(torch.func.vmap(sfp)(x), torch.func.vmap(sfp.trunk)(x))
    assert torch.equal(torch.func.jacrev(sfp)(x[0]), torch.func.jacrev(sfp.trunk)(x[0]))
    assert sfp.stats.hits == 0


class NoisyLinear(nn.Linear):
    """A noisy-network layer: fresh weight noise on every call in training mode."""

    def forward(self, x):
        noise = torch.randn_like(self.weight) * 0.1 if self.training else 0.0
        return nn.functional.linear(x, self.weight + noise, self.bias)


class FunctionalDropout(nn.Module):
    def forward(self, x):
        return nn.functional.dropout(x, 0.3, self.training)


@pytest.mark.parametrize(
    "layer",
    [nn.RReLU(), FunctionalDropout(), NoisyLinear(8, 8), nn.MultiheadAttention(8, 2, dropout=0.5, batch_first=True)],
    ids=["rrelu", "functional_dropout", "noisy", "attention_dropout"],
)
def test_any_trunk_that_draws_random_numbers_is_computed_per_call(layer):
    """Both roles draw their own random numbers, and the stream stays aligned with the double pass."""

    class Trunk(nn.Module):
        def __init__(self):
            super().__init__()
            self.inp, self.layer = nn.Linear(OBS, 8), layer

        def forward(self, x):
            h = self.inp(x)
            if isinstance(self.layer, nn.MultiheadAttention):
                return self.layer(h.unsqueeze(1), h.unsqueeze(1), h.unsqueeze(1), need_weights=False)[0].squeeze(1)
            return self.layer(h)

    torch.manual_seed(0)
    trunk = Trunk()
    sfp = SingleForwardPass(trunk)
    x = torch.randn(5, OBS)
    torch.manual_seed(3)
    got = [sfp(x), sfp(x)]
    state = torch.get_rng_state()
    torch.manual_seed(3)
    expected = [trunk(x), trunk(x)]
    assert all(torch.equal(a, b) for a, b in zip(got, expected))
    assert torch.equal(state, torch.get_rng_state())
    assert (sfp.stats.hits, sfp.stats.bypasses) == (0, 2)
    sfp.eval()  # deterministic in eval mode: cached again
    with torch.no_grad():
        sfp(x), sfp(x)
    assert sfp.stats.hits == 1


def test_inference_mode_output_modified_in_place_by_a_head_is_not_served_modified():
    sfp = sfp_mlp()
    with torch.inference_mode():
        x = torch.randn(5, OBS)
        nn.ReLU(inplace=True)(sfp(x)).mul_(3.0)  # a head that works in place on the features
        served = sfp(x)
        assert torch.equal(served, sfp.trunk(x))
        served.zero_()  # the partner's copy is its own too
        assert not torch.equal(sfp(x), served)
    assert sfp.stats.hits == 1


def test_separate_backward_per_head_raises_a_clear_error():
    """One trunk output, two losses, two backwards: the second finds the trunk graph freed. The uncached
    twin works, so the cached model says what to do instead of autograd's generic message."""
    from omni_sfp.sfp.cache import SharedGraphBackwardError

    model, twin = make_model(), make_model("off")
    x = torch.randn(5, OBS)
    policy_mean(twin, x).sum().backward()
    value(twin, x).sum().backward()
    policy_loss, value_loss = policy_mean(model, x).sum(), value(model, x).sum()
    policy_loss.backward()
    with pytest.raises(SharedGraphBackwardError, match="sum the losses"):
        value_loss.backward()
    policy_loss, value_loss = policy_mean(model, x).sum(), value(model, x).sum()
    torch.autograd.grad(policy_loss, list(model.trunk.parameters()))
    with pytest.raises(SharedGraphBackwardError, match="retain_graph=True"):  # per-head autograd.grad too
        torch.autograd.grad(value_loss, list(model.trunk.parameters()))


def test_separate_backward_with_retain_graph_matches_the_double_pass():
    model, twin = make_model(), make_model("off")
    x = torch.randn(5, OBS)
    for m in (model, twin):
        policy_loss, value_loss = policy_mean(m, x).pow(2).sum(), value(m, x).pow(2).sum()
        policy_loss.backward(retain_graph=True)
        value_loss.backward()
    for (name, a), (_, b) in zip(model.named_parameters(), twin.named_parameters()):
        assert_summation_order_close(a.grad, b.grad, name=name)
    assert model.sfp_stats.hits == 1


def test_trunk_hooks_fire_on_every_call():
    sfp = sfp_mlp()
    calls = []
    handle = sfp.trunk[0].register_forward_hook(lambda module, args, out: calls.append(1))
    x = torch.randn(5, OBS)
    with torch.no_grad():
        sfp(x), sfp(x)
    assert len(calls) == 2 and sfp.stats.bypasses == 2
    handle.remove()
    with torch.no_grad():
        sfp(x), sfp(x)
    assert sfp.stats.hits == 1


def test_deepcopy_and_save_carry_no_entry():
    import copy
    import io

    sfp = sfp_mlp()
    sfp(torch.randn(5, OBS))  # a graph-carrying entry: graphs cannot be deep-copied
    assert copy.deepcopy(sfp)._entry is None
    model = make_model()
    x = torch.randn(4096, OBS)
    policy_mean(model, x)
    twin = copy.deepcopy(model)
    assert twin.trunk._entry is None
    assert torch.equal(value(twin, x), value(model, x))
    with torch.no_grad():
        value(model, x)  # a graph-free entry holding a 4096-row batch
    empty, full = io.BytesIO(), io.BytesIO()
    torch.save(make_model(), empty)
    torch.save(model, full)
    assert abs(full.tell() - empty.tell()) < 4096 * OBS * 4 / 2, "the cached batch was written"
    full.seek(0)
    assert torch.load(full, weights_only=False).trunk._entry is None
    assert set(model.state_dict()) == set(make_model().state_dict())


def test_graph_free_entry_does_not_keep_its_input_or_upstream_graph_alive():
    encoder = nn.Linear(OBS, OBS)
    sfp = sfp_mlp()
    h = encoder(torch.randn(5, OBS))  # carries the encoder's graph
    with torch.no_grad():
        sfp(h)
    alive = weakref.ref(h)
    del h
    gc.collect()
    assert alive() is None


def test_swapped_module_and_frozen_parameters_are_in_the_key():
    sfp = sfp_mlp()
    x = torch.randn(5, OBS)
    with torch.no_grad():
        sfp(x)
        sfp.trunk[1] = nn.Tanh()  # a swapped activation: a new module object
        assert torch.equal(sfp(x), sfp.trunk(x))
    out = sfp(x)
    for p in sfp.trunk[0].parameters():
        p.requires_grad_(False)  # frozen between the two calls: the twin gives them no gradient
    sfp(x).sum().backward()
    assert sfp.trunk[0].weight.grad is None
    del out
    assert sfp.stats.hits == 0


def test_float32_matmul_precision_is_in_the_key():
    sfp = sfp_mlp()
    x = torch.randn(5, OBS)
    previous = torch.get_float32_matmul_precision()
    try:
        with torch.no_grad():
            sfp(x)
            torch.set_float32_matmul_precision("medium" if previous != "medium" else "highest")
            assert torch.equal(sfp(x), sfp.trunk(x))
    finally:
        torch.set_float32_matmul_precision(previous)
    assert sfp.stats.misses == 2
