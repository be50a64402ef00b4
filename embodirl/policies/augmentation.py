"""Image augmentation for the update: DrQ's random shift (Kostrikov et al. 2020; Yarats et al. 2021).

:func:`random_shift` pads each image by ``pad`` pixels (repeating the border) and crops it back to its size at an
offset drawn per sample: the picture moves by up to ``pad`` pixels in each direction. Encoders apply it during the
update only (:class:`~embodirl.policies.encoders.CNNEncoder`'s ``random_shift``), never while collecting or
evaluating. Written here rather than taken from torchvision, whose ``RandomCrop`` crops a whole batch at one
offset; indexing with clamped coordinates is the replicate padding without materialising the padded images, and
works on ``uint8`` frames before they are converted.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["random_shift", "shift_images"]


def shift_images(images: Tensor, offsets: Tensor, pad: int) -> Tensor:
    """Crop each image of the replicate-padded batch at its own offset.

    Args:
        images: ``[B, H, W, C]`` (any dtype).
        offsets: ``[B, 2]`` int64 ``(row, column)`` of each crop's top-left corner in the padded image, in
            ``[0, 2 pad]``; ``(pad, pad)`` returns the image itself.
        pad: Pixels of padding on every side.

    Returns:
        ``[B, H, W, C]``: ``out[b, i, j] = padded[b, i + offsets[b, 0], j + offsets[b, 1]]``, where ``padded`` is
        ``images`` padded by ``pad`` pixels that repeat the border.
    """
    batch, height, width, _ = images.shape
    rows = (torch.arange(height, device=images.device) + offsets[:, :1] - pad).clamp(0, height - 1)  # [B, H]
    cols = (torch.arange(width, device=images.device) + offsets[:, 1:] - pad).clamp(0, width - 1)  # [B, W]
    index = torch.arange(batch, device=images.device).view(batch, 1, 1)
    return images[index, rows[:, :, None], cols[:, None, :]]


def random_shift(images: Tensor, pad: int, generator: torch.Generator | None = None) -> Tensor:
    """``images`` ``[B, H, W, C]`` each shifted by a random offset in ``[-pad, pad]^2`` (border repeated);
    the shape and dtype stay."""
    offsets = torch.randint(0, 2 * pad + 1, (images.shape[0], 2), device=images.device, generator=generator)
    return shift_images(images, offsets, pad)
