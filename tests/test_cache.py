"""The single-forward-pass cache, one test per hazard: every hit must leave the caller's result unchanged."""

import gc
import weakref

import gymnasium
import pytest
import torch
from tolerances import assert_summation_order_close
from torch import nn

from omni_sfp import SharedActorCritic, SingleForwardPass
from omni_sfp.models import make_mlp

OBS, ACT = 6, 2


def make_model(cache_check="auto", **kwargs) -> SharedActorCritic:
    torch.manual_seed(0)
    box = gymnasium.spaces.Box
    return SharedActorCritic(box(-1, 1, (OBS,)), box(-1, 1, (ACT,)), "cpu", units=(32, 16), cache_check=cache_check, **kwargs)


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
    with torch.no_grad():
        assert value(model, torch.zeros(3, OBS)).shape == (3, 1)


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
    assert model.trunk.trunk[0].weight.grad is not None
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
        model.trunk.trunk[0].bias.mul_(2.0)
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
