"""omni_sfp.ppo.scaler.StandardScaler against skrl's RunningStandardScaler: the same bits, through training calls,
loads and copies, while the float32 statistics it derives are reused between them."""

from __future__ import annotations

import copy

import torch
from skrl.resources.preprocessors.torch import RunningStandardScaler

from omni_sfp.ppo.scaler import StandardScaler


def pair(size: int = 5) -> tuple[RunningStandardScaler, StandardScaler]:
    return RunningStandardScaler(size, device="cpu"), StandardScaler(size, device="cpu")


def assert_same_results(skrl_scaler, ours, x: torch.Tensor) -> None:
    for inverse in (False, True):
        expected, got = skrl_scaler(x, inverse=inverse), ours(x, inverse=inverse)
        assert torch.equal(expected, got), f"inverse={inverse}: {(expected - got).abs().max()}"


def test_every_result_equals_skrls_through_training_calls():
    generator = torch.Generator().manual_seed(0)
    skrl_scaler, ours = pair()
    x = torch.randn(64, 5, generator=generator) * 7 + 3
    assert_same_results(skrl_scaler, ours, x)  # the initial statistics
    for step in range(4):
        batch = torch.randn(32, 5, generator=generator) * (step + 1) - step
        assert torch.equal(skrl_scaler(batch, train=True), ours(batch, train=True))
        assert_same_results(skrl_scaler, ours, x)  # the new statistics, not the derived ones of before
    three_dims = torch.randn(4, 8, 5, generator=generator)
    assert torch.equal(skrl_scaler(three_dims, train=True), ours(three_dims, train=True))
    assert_same_results(skrl_scaler, ours, x)


def test_the_derived_statistics_are_reused_until_the_statistics_change():
    _, ours = pair()
    x = torch.randn(16, 5)
    ours(x)
    derived = ours._statistics()
    assert all(a is b for a, b in zip(ours._statistics(), derived))  # no new tensor between two calls
    ours(x, train=True)
    assert ours._statistics()[0] is not derived[0]


def test_a_load_or_an_in_place_edit_is_seen():
    skrl_scaler, ours = pair()
    x = torch.randn(16, 5)
    ours(x)  # derive from the initial statistics
    trained, _ = pair()
    trained(torch.randn(100, 5) * 4 + 2, train=True)
    skrl_scaler.load_state_dict(trained.state_dict())
    ours.load_state_dict(trained.state_dict())  # an in-place copy into the same buffers
    assert_same_results(skrl_scaler, ours, x)
    with torch.no_grad():
        for scaler in (skrl_scaler, ours):
            scaler.running_mean.add_(1.5)
    assert_same_results(skrl_scaler, ours, x)


def test_copies_and_pickles_carry_the_statistics_only():
    skrl_scaler, ours = pair()
    for scaler in (skrl_scaler, ours):
        scaler(torch.arange(50.0).reshape(10, 5), train=True)
    ours(torch.zeros(2, 5))
    clone = copy.deepcopy(ours)
    assert clone._derived is None
    assert_same_results(skrl_scaler, clone, torch.randn(8, 5))


def test_training_writes_the_statistics_into_the_same_buffers_so_a_recorded_graph_reads_them():
    ours, theirs = StandardScaler(3), RunningStandardScaler(3)
    buffers = [ours.running_mean, ours.running_variance, ours.current_count]
    addresses = [buffer.data_ptr() for buffer in buffers]
    for batch in torch.randn(4, 16, 3).unbind():
        ours(batch, train=True), theirs(batch, train=True)
    assert [ours.running_mean, ours.running_variance, ours.current_count] == buffers  # the same objects
    assert [buffer.data_ptr() for buffer in buffers] == addresses
    for name in ("running_mean", "running_variance", "current_count"):
        assert torch.equal(getattr(ours, name), getattr(theirs, name)), name
