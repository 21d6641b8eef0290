"""The CPU's ELU kernels: torch's, or a hand-written one, chosen per path (:mod:`omni_sfp.compute.cpu_choices`
times both on the CPU that runs them). The models use :class:`ELU` for ``activation: elu``."""

from __future__ import annotations

import torch
import torch.autograd.forward_ad as _forward_ad
import torch.nn.functional as F
from torch import nn


def fast_elu(x: torch.Tensor) -> torch.Tensor:
    """ELU (alpha 1) as ``max(x, exp(min(x, 0)) - 1)``: within 2**-23 of torch's (``exp`` and ``expm1`` are each
    within an ulp, under 2**-24 for results in (-1, 1); ``- 1`` is exact or rounds by 2**-25)."""
    return torch.clamp(x, max=0.0).exp_().sub_(1.0).clamp_(min=x)  # exp(x) - 1 >= x where x <= 0


class FastELUFunction(torch.autograd.Function):
    """:func:`fast_elu` with torch's own ELU backward, computed from the output (``dy/dx = y + 1`` for x <= 0)."""

    @staticmethod
    def forward(x: torch.Tensor) -> torch.Tensor:
        return fast_elu(x)

    @staticmethod
    def setup_context(ctx, inputs, output) -> None:
        ctx.save_for_backward(output)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        (output,) = ctx.saved_tensors
        return torch.ops.aten.elu_backward(grad, 1.0, 1.0, 1.0, True, output)


def fast_elu_(x: torch.Tensor) -> torch.Tensor:
    """:func:`fast_elu` written over ``x``: the same values bit for bit, but for the sign of a zero (``-0.0``
    stays ``-0.0``, as torch's ELU gives)."""
    return x.clamp_(min=torch.clamp(x, max=0.0).exp_().sub_(1.0))


def transform_active() -> bool:
    """A ``torch.func`` transform (grad, vmap, jacrev, ...) or a forward-mode AD level is active: inputs and
    parameters may be wrapped or carry tangents, so modules run their plain, out-of-place code."""
    return torch._C._functorch.peek_interpreter_stack() is not None or _forward_ad._current_level >= 0


class FastELUInPlace(torch.autograd.Function):
    """:func:`fast_elu_` with :class:`FastELUFunction`'s backward: the same gradients bit for bit."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        fast_elu_(x)
        ctx.mark_dirty(x)
        ctx.save_for_backward(x)
        return x

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        (output,) = ctx.saved_tensors
        return torch.ops.aten.elu_backward(grad, 1.0, 1.0, 1.0, True, output)


ELU_KERNELS: tuple[str, ...] = ("torch", "fast")  # torch's F.elu, or :func:`fast_elu`
# The ELU kernel each path uses, process-wide (as torch.set_num_threads): without autograd (the rollout, the
# last values, evaluation) and with it (the update's minibatches). torch's until :func:`use_elu_kernels` says
# otherwise: the runner sets them from omni_sfp.compute.cpu_choices, which measures both on the CPU that runs them.
_elu_kernels = {"no_grad": "torch", "autograd": "torch"}


def use_elu_kernels(*, no_grad: str, autograd: str) -> None:
    """Choose the kernel of :class:`ELU` without and with autograd (each one of :data:`ELU_KERNELS`).

    :raises ValueError: a kernel that is not one of them.
    """
    for path, kernel in (("no_grad", no_grad), ("autograd", autograd)):
        if kernel not in ELU_KERNELS:
            raise ValueError(f"ELU kernel {path}={kernel!r} is not one of {', '.join(ELU_KERNELS)}")
    _elu_kernels.update(no_grad=no_grad, autograd=autograd)


def elu_kernels() -> dict[str, str]:
    """The kernels :class:`ELU` uses now: ``{"no_grad": ..., "autograd": ...}``."""
    return dict(_elu_kernels)


class ELU(nn.ELU):
    """``nn.ELU`` whose CPU float32 kernel is chosen per path (:func:`use_elu_kernels`): torch's, or
    :func:`fast_elu` without autograd and :class:`FastELUFunction` with it. Both are within 2**-23 of each other.

    Why a choice: torch's CPU ELU evaluates ``expm1`` on every element. Where ``expm1`` is not vectorised
    (AMD Zen 3, no AVX-512) that is about twice the cost of ``exp``, and :func:`fast_elu` took 198 us
    against 324 for a 512 x 256 batch, a training minibatch of 8192 (forward and backward) 44.8 ms against
    56.5. Where it is (Zen 4 and Zen 5 with AVX-512), the rewrite only adds passes: torch's was 213 us
    against 233 (Zen 4) and 110 against 107 (Zen 5), with autograd 2.9 ms against 3.2 at 8192 x 256 (Zen 5).
    So neither wins everywhere, and omni_sfp.compute.cpu_choices measures both on the machine.

    ``inplace=True`` writes the result over the input, with either kernel. The trunk builders set it where the
    ELU follows a linear or convolution layer, whose output nothing else reads (their backward needs their
    input, not their output). The layer then keeps one tensor for the backward instead of two (the ELU's
    input and its output, which the next layer keeps), and the backward reads the output (``dy/dx = y + 1``,
    :class:`FastELUFunction`'s) instead of evaluating ``exp`` again. On Intel family 6 model 167 that took a
    big-network minibatch (2048 x [2048, 1024, 1024, 512], forward and backward, 2 threads) from 181.6 to
    178.2 ms. On other devices, in other dtypes, for ``alpha != 1`` and in TorchScript it is torch's ELU; under
    a ``torch.func`` transform or forward-mode AD it does not write in place.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.jit.is_scripting() or self.alpha != 1.0 or x.device.type != "cpu" or x.dtype != torch.float32:
            return F.elu(x, self.alpha, self.inplace)
        return self._chosen(x)

    @torch.jit.unused
    def _chosen(self, x: torch.Tensor) -> torch.Tensor:
        inplace = self.inplace and not transform_active()
        if x.requires_grad and torch.is_grad_enabled():
            if _elu_kernels["autograd"] == "fast":
                return FastELUInPlace.apply(x) if inplace else FastELUFunction.apply(x)
            return F.elu(x, inplace=inplace)
        if _elu_kernels["no_grad"] == "fast":
            return fast_elu_(x) if inplace else fast_elu(x)
        return F.elu(x, inplace=inplace)
