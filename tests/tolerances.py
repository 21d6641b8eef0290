"""Tolerances derived from the bound the README claims, shared by every test that compares gradients.

The cache's claim: gradients equal the uncached model's up to the order of floating-point summation at the
trunk output (both heads' gradients are summed before one trunk backward instead of after two). Reordering a
sum of ``n`` terms changes it by at most ``2 (n - 1) u * sum|terms|`` (u: unit roundoff), so the difference
is bounded relative to the magnitude of the terms, not to the (possibly cancelled) result: a small component
that is a difference of large ones may differ by many of *its own* ulps, and by how many depends on the
CPU's kernels (AMX and AVX-512 Xeons block and order their reductions differently from EPYCs). The bound is
therefore taken against the tensor's largest component, which is at most the sum of the terms' magnitudes:

- fp32 (u = 2**-24): ``|g - g_twin| <= 1e-5 * max|g_twin| + 1e-7``, about 100 ulps of the largest component,
  room for reductions of a few hundred terms; a lost or doubled head gradient is off by tens of percent.
- bf16 autocast (u = 2**-8, rounding at the output gradient and at every matmul): ``2**-5 * max|g_twin|``.
"""

from __future__ import annotations

import torch

FP32_RELATIVE, FP32_ABSOLUTE = 1e-5, 1e-7
BF16_RELATIVE = 2**-5


def summation_order_bound(reference: torch.Tensor, bf16: bool = False) -> float:
    scale = reference.detach().abs().max().item() if reference.numel() else 0.0
    return BF16_RELATIVE * scale if bf16 else FP32_RELATIVE * scale + FP32_ABSOLUTE


def assert_summation_order_close(
    actual: torch.Tensor | None, reference: torch.Tensor | None, *, bf16: bool = False, name: str = ""
) -> None:
    """Within the bound; ``None`` (no gradient) must match ``None``."""
    if actual is None or reference is None:
        assert actual is None and reference is None, f"{name}: a gradient in one model only"
        return
    assert actual.shape == reference.shape, f"{name}: shape {tuple(actual.shape)} != {tuple(reference.shape)}"
    bound = summation_order_bound(reference, bf16)
    difference = (actual.detach().float() - reference.detach().float()).abs().max().item() if actual.numel() else 0.0
    assert difference <= bound, f"{name} differs by {difference:.3g} (bound {bound:.3g})"
