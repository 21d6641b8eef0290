"""omni_sfp.compute.optim.clip_and_step: the one clipped Adam step of the agent, the probe and the floor."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from omni_sfp.compute.optim import clip_and_step


def model_with_gradients(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(12, 32), nn.ELU(), nn.Linear(32, 3))
    model(torch.randn(64, 12)).square().sum().backward()
    return model


def stepped(fused: bool, clip: float, scaler: torch.amp.GradScaler | None = None) -> torch.Tensor:
    """The parameters after one ``clip_and_step`` from the same gradients, flattened."""
    model = model_with_gradients()
    parameters = list(model.parameters())
    optimizer = torch.optim.Adam(parameters, lr=1e-2, fused=fused)
    clip_and_step(optimizer, parameters, clip, scaler)
    assert not hasattr(optimizer, "grad_scale")
    return torch.cat([p.detach().flatten() for p in parameters])


def test_fused_adam_with_the_clip_as_its_grad_scale_moves_parameters_as_clip_grad_norm_then_adam():
    """The clip is active (the norm is far above 1e-3). Bound: Adam's first step moves each parameter by
    ``lr * g / (|g| + eps)``, at most lr; the fused kernel divides by the clip factor where the loop multiplies
    the gradients by its inverse, a few roundings of 2**-24 on that step plus one of the parameter itself."""
    norm = torch.nn.utils.get_total_norm([p.grad for p in model_with_gradients().parameters()])
    assert norm > 100 * 1e-3
    fused, loop, unclipped = stepped(True, 1e-3), stepped(False, 1e-3), stepped(True, 0.0)
    bound = 16 * 2**-24 * 1e-2 + torch.finfo(torch.float32).eps * loop.abs()
    assert (fused - loop).abs().le(bound).all(), (fused - loop).abs().max()
    before = torch.cat([p.detach().flatten() for p in model_with_gradients().parameters()])
    assert (fused - before).abs().max() > 0
    # Adam's first step is sign(g) * lr whatever the scale, except where |g| is near eps: the clip shows there
    assert not torch.equal(fused, unclipped)


def test_a_norm_below_the_clip_steps_as_no_clip_bit_for_bit():
    """The fused step then divides by exactly 1.0."""
    assert torch.equal(stepped(True, 1e9), stepped(True, 0.0))
    assert torch.equal(stepped(False, 1e9), stepped(False, 0.0))


def test_a_disabled_grad_scaler_steps_as_none():
    disabled = torch.amp.GradScaler(device="cpu", enabled=False)
    assert torch.equal(stepped(True, 1e-3, disabled), stepped(True, 1e-3))
    assert torch.equal(stepped(False, 1e-3, disabled), stepped(False, 1e-3))


def test_the_grad_scale_is_removed_even_when_the_step_raises():
    model = model_with_gradients()
    parameters = list(model.parameters())
    optimizer = torch.optim.Adam(parameters, lr=1e-2, fused=True)

    def failing_step(*args, **kwargs):
        raise RuntimeError("step failed")

    optimizer.step = failing_step
    with pytest.raises(RuntimeError, match="step failed"):
        clip_and_step(optimizer, parameters, 1e-3)
    assert not hasattr(optimizer, "grad_scale")
