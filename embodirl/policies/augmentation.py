"""Image augmentation for the update: DrQ's random shift (Kostrikov et al. 2020; Yarats et al. 2021).

:func:`random_shift` pads each image by ``pad`` pixels (repeating the border) and crops it back to its size at an
offset drawn per sample: the picture moves by up to ``pad`` pixels in each direction. Encoders apply it during the
update only (:class:`~embodirl.policies.encoders.CNNEncoder`'s ``random_shift``), never while collecting or
evaluating. Written here rather than taken from torchvision, whose ``RandomCrop`` crops a whole batch at one
offset. The padding concatenates the border rows and columns (``F.pad``'s replicate mode takes no ``uint8``), and
every crop of the padded batch is a view (``unfold``) from which one index picks each sample's: this works on
``uint8`` frames before they are converted, and copies each pixel twice.
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
    batch, height, width, channels = images.shape
    top, bottom = images[:, :1], images[:, -1:]
    images = torch.cat([top.expand(batch, pad, width, channels), images, bottom.expand(batch, pad, width, channels)], 1)
    left, right = images[:, :, :1], images[:, :, -1:]
    padded = torch.cat([left.expand(batch, height + 2 * pad, pad, channels), images,
                        right.expand(batch, height + 2 * pad, pad, channels)], 2)
    crops = padded.unfold(1, height, 1).unfold(2, width, 1)  # [B, 2 pad + 1, 2 pad + 1, C, H, W], a view
    picked = crops[torch.arange(batch, device=images.device), offsets[:, 0], offsets[:, 1]]  # [B, C, H, W]
    return picked.permute(0, 2, 3, 1)


def random_shift(images: Tensor, pad: int, generator: torch.Generator | None = None) -> Tensor:
    """``images`` ``[B, H, W, C]`` each shifted by a random offset in ``[-pad, pad]^2`` (border repeated);
    the shape and dtype stay."""
    offsets = torch.randint(0, 2 * pad + 1, (images.shape[0], 2), device=images.device, generator=generator)
    return shift_images(images, offsets, pad)
