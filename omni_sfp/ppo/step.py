"""One PPO minibatch as a function of tensors: both roles' forward (the shared trunk once), the losses, the
(scaled) backward, the clip and the fused optimizer step, with every statistic left on the device.

The same function runs eagerly, through ``torch.compile`` as one graph, or replayed from a CUDA graph
(``train.capture``; :mod:`omni_sfp.compute.capture`). In every form it reads no tensor on the host: the losses and
the KL are summed into device tensors that the update reads once, at its end. With fused Adam the learning rate is
a device tensor too (:class:`DeviceLearningRate`), and skrl's KL-adaptive rule runs on the device once an epoch.

The loss is skrl 2.1.1's (tests/test_agent.py pins the eager update to skrl's bit for bit): the clipped surrogate,
the entropy bonus, the value loss with skrl's value clip, and rl_games' bound loss on the policy mean.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any

import torch
import torch.nn.functional as F

from omni_sfp.compute.optim import clip_and_step
from omni_sfp.ppo.minibatches import Minibatch
from omni_sfp.sfp.cache import SingleForwardPass


def bounds_loss(mean_actions: torch.Tensor, low: torch.Tensor, high: torch.Tensor) -> torch.Tensor:
    """rl_games' ``bound_loss``: the squared excess of the policy mean beyond the soft bounds, summed over the
    action dimensions, averaged over the batch. Beyond the env's clip every sampled action acts alike, so the
    surrogate alone has no gradient that brings a runaway mean back (and the deterministic policy, which plays
    the mean, stops matching the sampled one that was trained); this term has one."""
    excess = torch.relu(mean_actions - high) + torch.relu(low - mean_actions)
    return excess.square().sum(dim=-1).mean()


STATISTICS = ("policy_loss", "value_loss", "entropy_loss", "kl")  # the rows of MinibatchStep.totals


class MinibatchStep:
    """The PPO loss and optimizer step of one minibatch, for skrl models (``policy`` may be ``value``).

    :param cfg: skrl's ``PPO_CFG`` (ratio, value and gradient clips, loss scales).
    :param autocast: the update's autocast context.
    :param parameters: every trained parameter, once (the clip's norm runs over them).
    :param caches: the models' single-forward-pass caches (their graph entries end with each traced call).
    :param soft_bounds: rl_games' soft bounds of the policy mean, or None (no bound loss).
    :param reduce_gradients: averages the gradients over the processes (multi-process runs), or None.
    :param hidden_roles: a recurrent model's hidden states each role reads from :attr:`Minibatch.hidden` (policy,
        value); None: both read all (one shared model).
    """

    def __init__(
        self,
        *,
        policy: Any,
        value: Any,
        optimizer: torch.optim.Optimizer,
        scaler: torch.amp.GradScaler,
        cfg: Any,
        autocast: Callable[[], AbstractContextManager],
        parameters: Sequence[torch.nn.Parameter],
        caches: Sequence[SingleForwardPass],
        soft_bounds: tuple[torch.Tensor, torch.Tensor] | None,
        bounds_loss_scale: float,
        reduce_gradients: Callable[[], None] | None,
        device: torch.device,
        hidden_roles: tuple[slice, slice] | None = None,
    ) -> None:
        self.policy, self.value, self.optimizer, self.scaler, self.cfg = policy, value, optimizer, scaler, cfg
        self.autocast, self.parameters, self.caches = autocast, list(parameters), list(caches)
        self.soft_bounds, self.bounds_loss_scale = soft_bounds, bounds_loss_scale
        self.reduce_gradients = reduce_gradients
        self.hidden_roles = hidden_roles
        # sums of STATISTICS over the update's minibatches (float64: as skrl's Python sums of the float32 losses)
        self.totals = torch.zeros(len(STATISTICS), dtype=torch.float64, device=device)
        self.epoch_kl = torch.zeros((), device=device)  # sum of this epoch's KLs (the KL-adaptive rate's input)
        self.losses: Callable[[Minibatch], tuple[torch.Tensor, torch.Tensor]] = self.loss  # compiled when captured

    def reset(self) -> None:
        """Zero the sums (an update starts)."""
        self.totals.zero_()
        self.epoch_kl.zero_()

    def loss(self, batch: Minibatch) -> tuple[torch.Tensor, torch.Tensor]:
        """The minibatch's loss and its statistics (:data:`STATISTICS`, float32), both on the device.

        The value call reads the same inputs as the policy call (for a recurrent model the same hidden states and
        done masks too, skrl ``PPO_RNN``'s inputs): the single-forward-pass cache serves it (eagerly by its key, in a
        traced graph by identity, :meth:`SingleForwardPass.end_graph`)."""
        cfg = self.cfg
        with self.autocast():
            inputs = {"observations": batch.observations, "states": batch.states}
            value_inputs = inputs
            if batch.hidden is not None:  # a recurrent model: sequences, their first hidden states and episode ends
                rnn = list(batch.hidden)
                policy_part, value_part = self.hidden_roles or (slice(None), slice(None))
                inputs.update(rnn=rnn[policy_part], terminated=batch.terminated, truncated=batch.truncated)
                if value_part != policy_part:  # a separate value model: its own hidden states
                    value_inputs = {**inputs, "rnn": rnn[value_part]}
            _, outputs = self.policy.act({**inputs, "taken_actions": batch.actions}, role="policy")
            log_prob = outputs["log_prob"]
            with torch.no_grad():  # approximate KL divergence
                ratio = log_prob - batch.log_prob
                kl = ((torch.exp(ratio) - 1) - ratio).mean()
            if cfg.entropy_loss_scale:
                entropy_loss = -cfg.entropy_loss_scale * self.policy.get_entropy(role="policy").mean()
            else:
                entropy_loss = torch.zeros((), device=kl.device)
            ratio = torch.exp(log_prob - batch.log_prob)
            surrogate = batch.advantages * ratio
            surrogate_clipped = batch.advantages * torch.clip(ratio, 1.0 - cfg.ratio_clip, 1.0 + cfg.ratio_clip)
            policy_loss = -torch.min(surrogate, surrogate_clipped).mean()

            predicted_values, _ = self.value.act(value_inputs, role="value")
            if cfg.value_clip > 0:
                predicted_values = batch.values + torch.clip(
                    predicted_values - batch.values, min=-cfg.value_clip, max=cfg.value_clip
                )
            value_loss = cfg.value_loss_scale * F.mse_loss(batch.returns, predicted_values)
            loss = policy_loss + entropy_loss + value_loss
            if self.soft_bounds is not None:  # rl_games' b_loss: in the backward, not in the reported policy loss
                loss = loss + self.bounds_loss_scale * bounds_loss(outputs["mean_actions"], *self.soft_bounds)
        for cache in self.caches:
            cache.end_graph()
        statistics = torch.stack([policy_loss.detach(), value_loss.detach(), entropy_loss.detach(), kl])
        return loss, statistics

    def apply(self, loss: torch.Tensor, statistics: torch.Tensor) -> None:
        """Backward, clip, optimizer step; the statistics are summed on the device."""
        self.optimizer.zero_grad()
        self.scaler.scale(loss).backward()
        if self.reduce_gradients is not None:
            self.reduce_gradients()
        clip_and_step(self.optimizer, self.parameters, self.cfg.grad_norm_clip, self.scaler)
        self.totals += statistics.double()
        self.epoch_kl += statistics[3]

    def __call__(self, *tensors: torch.Tensor | None) -> None:
        """One whole step on a minibatch's tensors (:meth:`Minibatch.tensors`): what a CUDA graph records."""
        loss, statistics = self.losses(Minibatch.of(tensors))
        self.apply(loss, statistics)

    def snapshot(self) -> Callable[[], None]:
        """Save what a step changes (parameters, the optimizer's state, the GradScaler's, the sums); the returned
        function puts it back in place (the same tensors: a graph keeps their addresses). Capturing uses it to
        undo its warm-up steps; it reads the GradScaler's scale on the host, once a capture."""
        tensors = [*self.parameters, self.totals, self.epoch_kl]
        for state in self.optimizer.state.values():
            tensors += [value for value in state.values() if isinstance(value, torch.Tensor)]
        copies = [tensor.detach().clone() for tensor in tensors]
        scaler = self.scaler.state_dict() if self.scaler.is_enabled() else None

        def restore() -> None:
            with torch.no_grad():
                for tensor, copy in zip(tensors, copies):
                    tensor.copy_(copy)
            if scaler is not None:
                self.scaler.load_state_dict(scaler)

        return restore


class DeviceLearningRate:
    """Fused Adam's learning rate as a device tensor, and skrl's ``KLAdaptiveLR`` rule applied to it on the device.

    The rule's arithmetic runs in float64, as skrl's on Python floats, so it takes the same decisions and gives
    the same rates (tests/test_step.py); fused Adam reads the rate where its kernel runs (float32 on CUDA, the
    float64 tensor itself on the CPU). Nothing is read back until the update reports its rate.

    :param scheduler: skrl's ``KLAdaptiveLR`` (its threshold, factors and bounds are read at each step, so an
        annealed ``max_lr`` applies), or None for a fixed rate.
    """

    def __init__(self, optimizer: torch.optim.Optimizer, scheduler: Any, device: torch.device) -> None:
        self.optimizer, self.scheduler = optimizer, scheduler
        self.rate = torch.tensor(float(optimizer.param_groups[0]["lr"]), dtype=torch.float64, device=device)
        self.applied = self.rate if device.type == "cpu" else torch.empty((), device=device)
        self.attach()

    def attach(self) -> None:
        """Point every parameter group at the device rate, taking the groups' current value (after a
        ``load_state_dict`` that wrote a number or another tensor there), and keep the groups capturable (a loaded
        group takes the saving run's flags; the fused kernel computes the same either way)."""
        current = self.optimizer.param_groups[0]["lr"]
        if current is not self.applied:
            self.rate.fill_(float(current))
        if self.applied is not self.rate:
            self.applied.copy_(self.rate)
        for group in self.optimizer.param_groups:
            group["lr"] = self.applied
            group["capturable"] = True

    def set(self, value: float, *, at_most: bool = False) -> None:
        """Set the rate (``at_most``: only lower it to ``value``); on the device, no read."""
        if at_most:
            self.rate.clamp_(max=value)
        else:
            self.rate.fill_(value)
        self._publish()

    def adapt(self, kl: torch.Tensor) -> None:
        """skrl's ``KLAdaptiveLR.step(kl)``: divide by ``lr_factor`` (not below ``min_lr``) when the KL is above
        ``kl_factor`` times the threshold, multiply (not above ``max_lr``) when below its ``kl_factor``-th part."""
        s = self.scheduler
        kl = kl.double()
        lower = torch.clamp(self.rate / s._lr_factor, min=s.min_lr)
        higher = torch.clamp(self.rate * s._lr_factor, max=s.max_lr)
        high, low = s.kl_threshold * s._kl_factor, s.kl_threshold / s._kl_factor
        self.rate.copy_(torch.where(kl > high, lower, torch.where(kl < low, higher, self.rate)))
        self._publish()

    def _publish(self) -> None:
        if self.applied is not self.rate:
            self.applied.copy_(self.rate)

    def report(self, value: float) -> None:
        """The host's copy of the rate, read with the update's losses: kept where skrl's scheduler keeps it."""
        if self.scheduler is not None:
            self.scheduler._last_lr = [value for _ in self.optimizer.param_groups]
