"""The observation and value normaliser: skrl's running standard scaler with a cheaper inference path.

Imported after :func:`omni_sfp.compute.distributed.setup`, as everything that imports skrl: importing skrl runs its
process-group setup.
"""

from __future__ import annotations

import torch
from skrl.resources.preprocessors.torch import RunningStandardScaler

from omni_sfp.compute import distributed


class StandardScaler(RunningStandardScaler):
    """skrl's ``RunningStandardScaler``, keeping the float32 mean, standard deviation and ``std + epsilon``
    that it derives from its float64 statistics on every call, until the statistics change.

    The statistics change in training calls (written into the same buffers, :meth:`_parallel_variance`) or by a
    load (an in-place copy): the derived tensors are rebuilt when a buffer is another object, has another data
    pointer or another version. Every result equals skrl's bit for bit (the same operations on the same values); a normalising
    call launches 3 kernels instead of 7, an inverse one 3 instead of 6. A rollout step makes two of them.
    """

    def __init__(self, *args, flat_parts: torch.Tensor | None = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._derived: tuple | None = None  # (mean, variance, their pointers and versions, mean32, std, std + eps)
        # a Dict or Tuple space's flat Box columns (flat_parts_of): only they are normalised, images and one-hot
        # codes pass through; None: every column
        self.flat_parts = None if flat_parts is None else flat_parts.to(self.device, torch.bool)

    def _statistics(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        mean, variance = self.running_mean, self.running_variance
        if torch.compiler.is_compiling():  # a captured act: the graph derives them (no pointers in a graph)
            std = torch.sqrt(variance.float())
            return mean.float(), std, std + self.epsilon
        # None for an inference tensor, which has no version counter: then nothing is kept
        state = tuple((t.data_ptr(), None if t.is_inference() else t._version) for t in (mean, variance))
        derived = self._derived
        if derived is None or derived[0] is not mean or derived[1] is not variance or derived[2] != state:
            std = torch.sqrt(variance.float())
            derived = (mean, variance, state, mean.float(), std, std + self.epsilon)
            self._derived = None if any(version is None for _, version in state) else derived
        return derived[3:]

    def _parallel_variance(self, input_mean: torch.Tensor, input_var: torch.Tensor, input_count: int) -> None:
        """skrl's update of the statistics, written into the same buffers: skrl assigns new tensors, and a captured
        act (a CUDA graph) reads the statistics from the addresses it recorded. The same values, bit for bit."""
        mean, variance, count = self.running_mean, self.running_variance, self.current_count
        super()._parallel_variance(input_mean, input_var, input_count)
        with torch.no_grad():
            for kept, new in (
                (mean, self.running_mean),
                (variance, self.running_variance),
                (count, self.current_count),
            ):
                kept.copy_(new)
        self.running_mean, self.running_variance, self.current_count = mean, variance, count

    def _compute(self, x: torch.Tensor, *, train: bool = False, inverse: bool = False) -> torch.Tensor:
        scaled = self._scaled(x, train=train, inverse=inverse)
        return scaled if self.flat_parts is None else torch.where(self.flat_parts, scaled, x)

    def _scaled(self, x: torch.Tensor, *, train: bool, inverse: bool) -> torch.Tensor:
        if train:
            return super()._compute(x, train=train, inverse=inverse)
        mean, std, denominator = self._statistics()
        if inverse:
            return std * torch.clamp(x, min=-self.clip_threshold, max=self.clip_threshold) + mean
        return torch.clamp((x - mean) / denominator, min=-self.clip_threshold, max=self.clip_threshold)

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_derived"] = None  # pickles and deep copies carry the statistics only
        return state


class DistributedRunningStandardScaler(StandardScaler):
    """skrl's ``RunningStandardScaler`` (as :class:`StandardScaler`) whose statistics are updated with each batch
    pooled over all ranks, so every rank normalises with the same mean and variance: those of all ranks' data.

    Each training call all-reduces one packed float64 vector (sums, sums of squares, count). All ranks
    make the same training calls in the same order: PPO's minibatch loop is identical on every rank as
    long as ``kl_threshold`` (a per-rank early stop) is off, which the config requires when distributed.
    """

    def _parallel_variance(self, input_mean, input_var, input_count) -> None:
        super()._parallel_variance(*distributed.pooled_moments(input_mean, input_var, input_count))


def scaler_class() -> type:
    """The observation/value normaliser class: :class:`StandardScaler` in a single process,
    :class:`DistributedRunningStandardScaler` in a multi-process run."""
    return DistributedRunningStandardScaler if distributed.world_size() > 1 else StandardScaler


def flat_parts_of(space) -> torch.Tensor:
    """Which columns of skrl's flat layout of ``space`` (``flatten_tensorized_space``) come from a flat ``Box``: the
    parts an observation normaliser should scale. Images (a ``Box`` of more dimensions) and ``Discrete`` /
    ``MultiDiscrete`` indices (one-hot coded by the network) are not."""
    from gymnasium import spaces
    from skrl.utils.spaces.torch import compute_space_size, flatten_tensorized_space

    def marks(part):  # the tensorized value of one sample, True where the part is a flat Box
        if isinstance(part, spaces.Dict):
            return {key: marks(part[key]) for key in part.keys()}
        if isinstance(part, spaces.Tuple):
            return tuple(marks(entry) for entry in part)
        flat = isinstance(part, spaces.Box) and len(part.shape) == 1
        return torch.full((1, compute_space_size(part, occupied_size=True)), flat)

    return flatten_tensorized_space(marks(space))[0]
