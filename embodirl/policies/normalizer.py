"""Running observation normalisation whose statistics live in the policy's state_dict."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from embodirl.runtime.distributed import allreduce_sum

__all__ = ["RunningNormalizer"]


class RunningNormalizer(nn.Module):
    """``clamp((x - mean) / sqrt(var + eps), -clip, clip)`` with running mean/var over all data seen.

    Statistics are buffers (checkpointed with the policy) and change only in :meth:`update`, which
    merges a batch with Chan et al.'s parallel formula.

    Args:
        shape: Per-sample shape.
        eps: Added to the variance.
        clip: Clamp of the normalised value.
        min_weight: The least weight of a batch in the merge: 0 (default) weighs all data seen alike; above 0 the
            statistics forget, an exponential average over about the last ``1 / min_weight`` batches once that many
            have been seen (before, the plain average of all of them).
    """

    mean: Tensor
    var: Tensor
    count: Tensor

    def __init__(self, shape: tuple[int, ...], eps: float = 1e-8, clip: float = 10.0, min_weight: float = 0.0) -> None:
        super().__init__()
        self.register_buffer("mean", torch.zeros(shape))
        self.register_buffer("var", torch.ones(shape))
        self.register_buffer("count", torch.zeros((), dtype=torch.float64))
        self.eps = eps
        self.clip = clip
        self.min_weight = min_weight

    def forward(self, x: Tensor) -> Tensor:
        return ((x - self.mean) * torch.rsqrt(self.var + self.eps)).clamp(-self.clip, self.clip)

    @torch.no_grad()
    def update(self, x: Tensor) -> None:
        """Merge a batch ``[B, *shape]``, pooled over all ranks, into the running statistics.

        Ranks exchange the batch's count, sum and sum of squares (float64) in one all-reduce, so
        every rank merges the same pooled batch and the statistics stay identical across ranks.
        """
        x = x.reshape(-1, *self.mean.shape).to(torch.float64)
        count = torch.tensor([float(x.shape[0])], dtype=torch.float64, device=x.device)
        stats = allreduce_sum(torch.cat([count, x.sum(0).reshape(-1), (x * x).sum(0).reshape(-1)]))
        size = self.mean.numel()
        batch_count = stats[0]
        batch_mean = (stats[1:1 + size] / batch_count).view_as(self.mean)
        batch_var = ((stats[1 + size:] / batch_count).view_as(self.mean) - batch_mean.pow(2)).clamp_min(0.0)
        total = self.count + batch_count
        w = (batch_count / total).clamp_min(self.min_weight).to(self.mean.dtype)
        delta = batch_mean.to(self.mean.dtype) - self.mean
        self.mean += delta * w
        self.var.copy_(self.var * (1 - w) + batch_var.to(self.mean.dtype) * w + delta.pow(2) * w * (1 - w))
        self.count.copy_(total)
