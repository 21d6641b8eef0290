"""Capturing a step that runs many times with the same shapes: ``torch.compile`` (one graph, no breaks) and, on
CUDA, a CUDA graph replayed over static input buffers.

Why: PPO's update is thousands of small kernels per minibatch. On a GPU the host cannot launch them as fast as
the device runs them (the update is bound by Python and by launches, not by the network), so the arithmetic a
single forward pass saves changes nothing until the launches go: a CUDA graph replays a whole minibatch with one
launch. ``torch.compile`` fuses the elementwise work around the matrix products into fewer kernels, on the CPU too.

:class:`GraphedStep` owns the CUDA graph side: a step function of tensors that returns nothing (it writes its
results into tensors that outlive it), a graph per input shape, warm-up on a side stream with the state restored
afterwards (the warm-up steps are real optimizer steps: they must leave no trace), and a key of everything the
graph fixed that is checked before each replay (a different key re-captures).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from omni_sfp.config.schema import ConfigError

WARMUP_CALLS = 2  # eager calls on a side stream before capturing: first-call allocations, compile, cuBLAS handles


class CaptureError(ConfigError):
    """A step cannot be captured; the message says why, in one line."""


def compile_step(function: Callable) -> Callable:
    """``torch.compile`` of a step function as one graph: a graph break is an error (``fullgraph``), not a silent
    fall back to Python between graphs. Shapes are static (a second shape compiles a second graph)."""
    return torch.compile(function, fullgraph=True, dynamic=False)


@dataclass
class _Graph:
    graph: Any  # torch.cuda.CUDAGraph
    inputs: list[torch.Tensor | None]  # the static buffers the graph reads
    outputs: Any  # what the step returned when it was captured: tensors in the graph's pool
    key: Any


class GraphedStep:
    """``step(*tensors)`` replayed from a CUDA graph, one graph per input layout.

    :param step: the step; it reads its tensor arguments and returns None or a tuple of tensors (every tensor it
        creates lives in the graph's memory pool and is overwritten by the next replay: a replay returns copies).
    :param snapshot: saves what the step changes in place (parameters, optimizer state, accumulators) and returns
        the function that restores it: called around the warm-up calls, so that capturing leaves the state as it
        found it (None: the step changes nothing but the random streams).
    :param key: what the graph fixed besides the shapes (parameters by identity and address, ...); called before
        every replay, a different value re-captures. None from it means the step cannot be replayed now.
    :param on_replay: called after each replay (Python that the graph does not run: counters).
    """

    def __init__(
        self,
        step: Callable[..., tuple[torch.Tensor, ...] | None],
        *,
        snapshot: Callable[[], Callable[[], None]] | None = None,
        key: Callable[[], Any],
        on_replay: Callable[[], None] | None = None,
    ) -> None:
        self.step, self.snapshot, self.key, self.on_replay = step, snapshot, key, on_replay
        self._graphs: dict[tuple, _Graph] = {}
        self.captures = 0  # graphs recorded, re-captures included
        self._pool = None  # one memory pool for every graph of this step

    def __call__(self, *tensors: torch.Tensor | None) -> tuple[torch.Tensor, ...] | None:
        layout = tuple(None if t is None else (tuple(t.shape), t.dtype, t.device) for t in tensors)
        key = self.key()
        if key is None:
            raise CaptureError("the step cannot be replayed from a CUDA graph now (a module hook is registered)")
        graph = self._graphs.get(layout)
        if graph is None or graph.key != key:
            graph = self._graphs[layout] = self._capture(tensors, key)
        for buffer, tensor in zip(graph.inputs, tensors):
            if buffer is not None:
                buffer.copy_(tensor, non_blocking=True)
        graph.graph.replay()
        if self.on_replay is not None:
            self.on_replay()
        return None if graph.outputs is None else tuple(output.clone() for output in graph.outputs)

    def _capture(self, tensors: Sequence[torch.Tensor | None], key: Any) -> _Graph:
        inputs = [None if t is None else t.detach().clone() for t in tensors]
        restore = self.snapshot() if self.snapshot is not None else (lambda: None)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        try:
            with torch.cuda.stream(side):
                for _ in range(WARMUP_CALLS):
                    self.step(*inputs)
        finally:
            torch.cuda.current_stream().wait_stream(side)
            restore()
        graph = torch.cuda.CUDAGraph()
        if self._pool is None:
            self._pool = torch.cuda.graph_pool_handle()
        with torch.cuda.graph(graph, pool=self._pool):
            outputs = self.step(*inputs)
        self.captures += 1
        return _Graph(graph, inputs, outputs, key)

    def reset(self) -> None:
        """Drop every graph (the next call captures again)."""
        self._graphs.clear()
