"""The optimizer step with the gradient-norm clip: one implementation for the agent's update
(:mod:`omni_sfp.ppo.agent`), the probe that chooses fused Adam (:mod:`omni_sfp.compute.cpu_choices`) and the
benchmark's compute floor (:mod:`omni_sfp.bench.floor`), so that all three pay the same clip."""

from __future__ import annotations

import torch


def clip_and_step(
    optimizer: torch.optim.Optimizer,
    parameters: list[torch.nn.Parameter],
    clip: float,
    scaler: torch.amp.GradScaler | None = None,
) -> None:
    """Clip the gradients' global norm to ``clip`` (0: no clip) and step. Fused Adam without an enabled
    GradScaler takes the clip as its ``grad_scale`` (it divides each gradient in the same kernel that applies
    it): no separate pass over the gradients. Otherwise torch's own ``clip_grad_norm_``, after the GradScaler's
    unscale."""
    scaling = scaler is not None and scaler.is_enabled()
    if clip > 0 and not scaling and optimizer.defaults.get("fused"):
        norm = torch.nn.utils.get_total_norm([p.grad for p in parameters if p.grad is not None])
        # clip_grad_norm_ multiplies by min(clip / (norm + 1e-6), 1); the fused step divides by its inverse
        optimizer.grad_scale = torch.clamp((norm + 1e-6) / clip, min=1.0)
        try:
            optimizer.step()
        finally:
            del optimizer.grad_scale
        return
    if clip > 0:
        if scaling:
            scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(parameters, clip)
    if scaler is None:
        optimizer.step()
        return
    scaler.step(optimizer)
    scaler.update()
