"""Cold start: keep ``torch._dynamo`` out of runs that compile nothing.

torch wraps a few optimizer methods (``Optimizer.add_param_group``, ``zero_grad``, ``state_dict``,
``load_state_dict``) in ``torch._disable_dynamo``, which imports ``torch._dynamo`` on the first call only to
mark the method as not traceable. That import costs as much as importing torch itself (about 4 s of the
7-10 s before the first iteration on this project's 2-core CPU, docs/benchmarks.md), and an eager run never
traces anything. :func:`defer_dynamo_import` pre-fills the cache that the wrapper consults with the plain
method, so the first call no longer imports dynamo; :func:`restore_dynamo_guards` empties it again before
anything is compiled, after which the wrapper imports dynamo and marks the methods as torch intends.
"""

from __future__ import annotations

import sys
from itertools import chain

_CACHE = "__dynamo_disable"  # the attribute torch._compile._disable_dynamo caches its disabled function in
_PREFILLED: list = []  # functions whose cache we filled (so that restore touches only those)


def _guarded_functions():
    """The undecorated functions behind ``torch._disable_dynamo`` wrappers on the optimizer classes."""
    import torch
    from torch._compile import _disable_dynamo

    wrapper_code = _disable_dynamo(lambda: None).__code__
    classes = [torch.optim.Optimizer, *torch.optim.Optimizer.__subclasses__()]
    for cls in classes:
        for attr in vars(cls).values():
            inner = getattr(attr, "__wrapped__", None)
            if getattr(attr, "__code__", None) is wrapper_code and inner is not None:
                yield inner


def defer_dynamo_import() -> int:
    """Let the optimizer's dynamo-guarded methods run without importing ``torch._dynamo``; returns how many
    were changed (0 when dynamo is imported already: then the guards cost nothing more and stay as they are).
    Call :func:`restore_dynamo_guards` before ``torch.compile`` runs."""
    if "torch._dynamo" in sys.modules:
        return 0
    count = 0
    for function in _guarded_functions():
        if getattr(function, _CACHE, None) is None:
            setattr(function, _CACHE, function)  # what the wrapper calls: the method itself, no dynamo marking
            _PREFILLED.append(function)
            count += 1
    return count


def restore_dynamo_guards() -> None:
    """Undo :func:`defer_dynamo_import`: the next call of each method marks it for dynamo, as torch does."""
    while _PREFILLED:
        function = _PREFILLED.pop()
        if getattr(function, _CACHE, None) is function:
            delattr(function, _CACHE)


def _undecorated_step(optimizer):
    """The optimizer class's own ``step``, under torch's profiling and grad-mode wrappers, or None."""
    step = type(optimizer).step
    for _ in range(4):  # profile_hook_step -> _use_grad_for_differentiable -> the method
        inner = getattr(step, "__wrapped__", None)
        if inner is None:
            break
        step = inner
    return step if step is not type(optimizer).step and not hasattr(step, "__wrapped__") else None


def eager_optimizer_step(optimizer) -> bool:
    """Give ``optimizer`` a ``step`` that does what torch's does outside ``torch.compile`` without importing
    ``torch._dynamo`` on every call (torch's grad-mode wrapper imports it to place a graph break, which only
    means something while compiling): the step hooks (global and the optimizer's, in torch's order, e.g. the
    cache's parameter generation), then the method itself under ``torch.no_grad()``.

    Returns False and changes nothing when dynamo is imported already, when the optimizer is differentiable,
    or when its ``step`` is not laid out as expected.
    """
    import torch
    from torch.optim import optimizer as optimizer_module

    if "torch._dynamo" in sys.modules or optimizer.defaults.get("differentiable"):
        return False
    method = _undecorated_step(optimizer)
    if method is None:
        return False
    global_pre, global_post = (
        optimizer_module._global_optimizer_pre_hooks,
        optimizer_module._global_optimizer_post_hooks,
    )

    def step(self, *args, **kwargs):  # torch.optim.Optimizer.profile_hook_step, less the profiler range
        args = (self, *args)
        for pre_hook in chain(global_pre.values(), self._optimizer_step_pre_hooks.values()):
            result = pre_hook(self, args, kwargs)
            if result is not None:
                args, kwargs = result
        with torch.no_grad():
            loss = method(*args, **kwargs)
        self._optimizer_step_code()
        for post_hook in chain(self._optimizer_step_post_hooks.values(), global_post.values()):
            post_hook(self, args, kwargs)
        self._opt_called = True  # what an LR scheduler's wrapper of step records
        return loss

    step._wrapped_by_lr_sched = True  # an LR scheduler built before keeps working without wrapping it again
    optimizer.step = step.__get__(optimizer)
    return True
