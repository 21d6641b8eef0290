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
    # a recurrent model's (SequenceSampler): the hidden states before each row, (states, layers, n, hidden), and
    # where each row's episode ended, (n, 1) bool each; None for a feed-forward one
    hidden: torch.Tensor | None = None
    terminated: torch.Tensor | None = None
    truncated: torch.Tensor | None = None

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

    def order(self, epoch: int) -> torch.Tensor:
        """The rows of epoch ``epoch`` in minibatch order: skrl PPO's permutation, one draw per epoch."""
        return torch.randperm(self.samples, dtype=torch.long).to(self.scalars.device, non_blocking=True)

    def extra(self, rows: torch.Tensor) -> dict[str, torch.Tensor]:
        """More fields of the minibatch of rollout rows ``rows`` (none here)."""
        return {}

    def epoch(self, epoch: int) -> Iterator[Minibatch]:
        """The minibatches of epoch ``epoch`` (0 first: it trains the normalisers as it goes)."""
        order = self.order(epoch)
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
            yield Minibatch(
                batch_observations,
                batch_states,
                actions[batch],
                log_prob,
                values,
                returns,
                advantages,
                **self.extra(order[batch]),
            )


def sequence_order(steps: int, envs: int) -> torch.Tensor:
    """skrl's ``Memory.all_sequence_indexes``: the rows of a ``(steps, envs)`` rollout env by env, each env's steps
    in time order (row ``t * envs + e``)."""
    return torch.arange(steps * envs).reshape(steps, envs).t().flatten()


class SequenceSampler(RolloutSampler):
    """A recurrent model's minibatches, as skrl 2.1.1's ``PPO_RNN`` samples them (``sample_all(...,
    sequence_length=L)``): the rollout env by env in time order, cut into ``mini_batches`` parts of whole sequences of
    ``L`` steps; the same minibatches in the same order every epoch (no permutation is drawn). Each minibatch carries
    the hidden states before its rows and the rows' episode ends, which the model reads to start each sequence
    and to reset within it.

    :param hidden: ``(states, steps * envs, layers, hidden)``: the hidden states before each step, rows as the
        other tensors' (step-major).
    :param terminated: ``(steps * envs, 1)`` bool (``truncated`` likewise).
    :raises ValueError: the rollout is not whole sequences (one line).
    """

    def __init__(
        self,
        *,
        hidden: torch.Tensor,
        terminated: torch.Tensor,
        truncated: torch.Tensor,
        steps: int,
        envs: int,
        sequence_length: int,
        mini_batches: int,
        **kwargs,
    ) -> None:
        if steps % sequence_length:
            raise ValueError(
                f"train.ppo.rollouts ({steps}) must be a multiple of the recurrent network's sequence_length "
                f"({sequence_length}): the update trains on whole sequences"
            )
        sequences = steps // sequence_length * envs
        if sequences < mini_batches:
            raise ValueError(
                f"train.ppo.mini_batches ({mini_batches}) is more than the rollout's {sequences} sequences of "
                f"{sequence_length} steps"
            )
        super().__init__(mini_batches=mini_batches, **kwargs)
        self.sizes = [size * sequence_length for size in split_sizes(sequences, mini_batches)]
        self.hidden, self.terminated, self.truncated = hidden, terminated, truncated
        self._order = sequence_order(steps, envs).to(self.scalars.device)
        self.gather_per_minibatch = True  # the order is fixed: gathering once an epoch would gather the same rows

    def order(self, epoch: int) -> torch.Tensor:
        return self._order

    def extra(self, rows: torch.Tensor) -> dict[str, torch.Tensor]:
        return {
            "hidden": self.hidden[:, rows].transpose(1, 2),  # (states, layers, n, hidden)
            "terminated": self.terminated[rows],
            "truncated": self.truncated[rows],
        }
