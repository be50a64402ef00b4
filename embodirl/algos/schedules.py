"""The adaptive learning rate (``algo.lr_schedule=adaptive_kl``, rsl_rl's rule), on floats or device tensors.

The other schedules (constant, linear, cosine, ``[[env_step, value], ...]`` lists) are pure Python and live with
the schemas that check them before torch is imported (:mod:`embodirl.config.schedule`).
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["ADAPTIVE_LR_MAX", "ADAPTIVE_LR_MIN", "adaptive_kl_lr"]

ADAPTIVE_LR_MIN, ADAPTIVE_LR_MAX = 1e-5, 1e-2  # rsl_rl's clamp of the adaptive learning rate


def adaptive_kl_lr(lr: float | Tensor, kl: float | Tensor, desired_kl: float, lr_min: float = ADAPTIVE_LR_MIN,
                   lr_max: float = ADAPTIVE_LR_MAX) -> float | Tensor:
    """rsl_rl's adaptive learning rate: ``lr / 1.5`` (at least ``lr_min``) when ``kl > 2 desired_kl``,
    ``lr * 1.5`` (at most ``lr_max``) when ``0 < kl < desired_kl / 2``, else ``lr``.

    Floats give a float; tensors (a capturable optimizer's learning rate, a device-side KL) give a tensor
    without a host sync.
    """
    if isinstance(lr, Tensor) or isinstance(kl, Tensor):
        lr, kl = torch.as_tensor(lr), torch.as_tensor(kl, device=torch.as_tensor(lr).device)
        lower = (lr / 1.5).clamp_min(lr_min)
        higher = (lr * 1.5).clamp_max(lr_max)
        return torch.where(kl > 2.0 * desired_kl, lower, torch.where((kl > 0) & (kl < desired_kl / 2.0), higher, lr))
    if kl > 2.0 * desired_kl:
        return max(lr_min, lr / 1.5)
    if 0.0 < kl < desired_kl / 2.0:
        return min(lr_max, lr * 1.5)
    return lr
