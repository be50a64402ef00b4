"""Running observation normalisation whose statistics live in the policy's state_dict."""

from __future__ import annotations

import torch
from torch import Tensor, nn

__all__ = ["RunningNormalizer"]


class RunningNormalizer(nn.Module):
    """``clamp((x - mean) / sqrt(var + eps), -clip, clip)`` with running mean/var over all data seen.

    Statistics are buffers (checkpointed with the policy) and change only in :meth:`update`, which
    merges a batch with Chan et al.'s parallel formula.

    Args:
        shape: Per-sample shape.
        eps: Added to the variance.
        clip: Clamp of the normalised value.
    """

    def __init__(self, shape: tuple[int, ...], eps: float = 1e-8, clip: float = 10.0) -> None:
        super().__init__()
        self.register_buffer("mean", torch.zeros(shape))
        self.register_buffer("var", torch.ones(shape))
        self.register_buffer("count", torch.zeros((), dtype=torch.float64))
        self.eps = eps
        self.clip = clip

    def forward(self, x: Tensor) -> Tensor:
        return ((x - self.mean) * torch.rsqrt(self.var + self.eps)).clamp(-self.clip, self.clip)

    @torch.no_grad()
    def update(self, x: Tensor) -> None:
        """Merge a batch ``[B, *shape]`` into the running statistics."""
        x = x.reshape(-1, *self.mean.shape).to(self.mean.dtype)
        batch_count = x.shape[0]
        batch_mean = x.mean(0)
        batch_var = x.var(0, unbiased=False)
        total = self.count + batch_count
        delta = batch_mean - self.mean
        w = (batch_count / total).to(self.mean.dtype)
        self.mean += delta * w
        m2 = self.var * (1 - w) + batch_var * w + delta.pow(2) * w * (1 - w)
        self.var.copy_(m2)
        self.count.copy_(total)
