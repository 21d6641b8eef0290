"""The update's sampling bookkeeping, apart from its loss: the rollout as flat samples, served minibatch by
minibatch as skrl 2.1.1's PPO serves them.

Same as skrl: one ``randperm`` per epoch from the global generator (so the same minibatches, in the same order),
minibatch sizes as ``numpy.array_split`` makes them, epoch 0 training the observation and state normalisers
minibatch by minibatch. Less work: a small sample (a flat observation) is gathered once an epoch and sliced into
contiguous minibatches (skrl gathers seven tensors per minibatch), a large one (an image) a minibatch at a time,
while it is still in cache; after epoch 0 the normalisers' statistics are final, so every sample is normalised
once for all later epochs. The minibatches have static shapes, which is what a captured step needs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, fields

import torch

# A sample above this many bytes is gathered a minibatch at a time: a camera image (6 x 96 x 96 floats, 221 KB)
# is, a flat observation (a few hundred bytes) is not; there is no size in between to tune
PER_MINIBATCH_GATHER_BYTES = 16 * 1024


@dataclass
class Minibatch:
    """One minibatch, normalised as the step reads it: rows of the rollout's samples."""

    observations: torch.Tensor
    states: torch.Tensor | None
    actions: torch.Tensor
    log_prob: torch.Tensor  # the rollout's log-probability of the actions, (n, 1)
    values: torch.Tensor  # the rollout's (normalised) values, (n, 1)
    returns: torch.Tensor  # (normalised) returns, (n, 1)
    advantages: torch.Tensor  # normalised advantages, (n, 1)

    def tensors(self) -> tuple[torch.Tensor | None, ...]:
        """The fields in order (a captured step copies them into its static buffers)."""
        return tuple(getattr(self, field.name) for field in fields(self))

    @classmethod
    def of(cls, tensors: tuple[torch.Tensor | None, ...]) -> Minibatch:
        return cls(*tensors)


def split_sizes(samples: int, parts: int) -> list[int]:
    """Minibatch sizes as skrl's memory splits its permutation (``numpy.array_split``: larger ones first)."""
    size, larger = divmod(samples, parts)
    return [size + 1] * larger + [size] * (parts - larger)


class RolloutSampler:
    """The rollout's samples, flat, and the minibatches of each epoch.

    :param observations: ``(samples, ...)`` raw observations (states likewise, or None).
    :param scalars: ``(4, samples)``: the rollout's log-probabilities, values, returns and advantages.
    :param normalise_observations: skrl's observation preprocessor (``train=True`` updates its statistics).
    :param autocast: the update's autocast context (the normalisers run under it, as skrl's do).
    """

    def __init__(
        self,
        *,
        observations: torch.Tensor,
        states: torch.Tensor | None,
        actions: torch.Tensor,
        scalars: torch.Tensor,
        mini_batches: int,
        normalise_observations: Callable[..., torch.Tensor],
        normalise_states: Callable[..., torch.Tensor | None],
        autocast: Callable[[], AbstractContextManager],
    ) -> None:
        self.observations, self.states, self.actions, self.scalars = observations, states, actions, scalars
        self.samples = scalars.shape[1]
        self.sizes = split_sizes(self.samples, mini_batches)
        self._normalise_observations, self._normalise_states = normalise_observations, normalise_states
        self._autocast = autocast
        self.gather_per_minibatch = observations[0].numel() * observations.element_size() > PER_MINIBATCH_GATHER_BYTES
        self._normalised: tuple[torch.Tensor, torch.Tensor | None] | None = None

    def epoch(self, epoch: int) -> Iterator[Minibatch]:
        """The minibatches of epoch ``epoch`` (0 first: it trains the normalisers as it goes)."""
        device = self.scalars.device
        order = torch.randperm(self.samples, dtype=torch.long).to(device, non_blocking=True)  # skrl's draw
        if epoch == 0:
            observations, states = self.observations, self.states
        else:
            if self._normalised is None:  # the statistics are final now: normalise every sample once
                with self._autocast():
                    self._normalised = (
                        self._normalise_observations(self.observations),
                        self._normalise_states(self.states),
                    )
            observations = self._normalised[0]
            states = self._normalised[1] if self.states is not None else None
        if not self.gather_per_minibatch:
            observations = observations[order]
            states = states[order] if states is not None else None
        actions, scalars = self.actions[order], self.scalars[:, order]
        start = 0
        for size in self.sizes:
            batch = slice(start, start + size)
            start += size
            rows = order[batch] if self.gather_per_minibatch else batch
            batch_observations = observations[rows]
            batch_states = states[rows] if states is not None else None
            if epoch == 0:
                with self._autocast():
                    batch_observations = self._normalise_observations(batch_observations, train=True)
                    batch_states = self._normalise_states(batch_states, train=True)
            log_prob, values, returns, advantages = (row[batch].unsqueeze(-1) for row in scalars)
            yield Minibatch(batch_observations, batch_states, actions[batch], log_prob, values, returns, advantages)
