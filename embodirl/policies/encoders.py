"""Encoders: one small module per observation key, turning ``[B, *shape]`` into features ``[B, out_dim]``.

A policy builds one encoder per observation key it reads, from the ``policy.encoders`` config (key ->
``_target_`` node) or, for keys not listed there, by :func:`default_encoder`: images (``uint8`` ``[H, W, C]``)
get a :class:`CNNEncoder`, everything else a :class:`FlattenEncoder`. To add an encoder: one class with
``__init__(self, cfg: MyEncoderConfig, *, shape, dtype)`` and ``out_dim``, its schema (a
:class:`~embodirl.config.schema.Schema` naming the class in ``target``), one test.
"""

from __future__ import annotations

import math
import typing
from collections.abc import Sequence

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from embodirl.config.policies import CNNEncoderConfig, FlattenEncoderConfig, MLPEncoderConfig
from embodirl.errors import ConfigError
from embodirl.policies.augmentation import random_shift
from embodirl.policies.networks import ACTIVATIONS, build_mlp

__all__ = ["MAX_IMAGE_CHANNELS", "CNNEncoder", "Encoder", "FlattenEncoder", "MLPEncoder", "default_encoder", "is_image"]


class Encoder(nn.Module):
    """``forward(x [B, *shape]) -> [B, out_dim]`` float32 features.

    ``passthrough`` is True when ``forward`` returns its input unchanged (a float32 vector for a
    :class:`FlattenEncoder`): policies then skip the call, which on a CPU costs as much as the ops it would run.
    """

    out_dim: int
    passthrough: bool = False


MAX_IMAGE_CHANNELS = 64  #: 16 stacked frames (env.frame_stack) of up to 4 channels


def is_image(shape: tuple[int, ...], dtype: torch.dtype) -> bool:
    """``uint8`` ``[H, W, C]`` with 1 to 64 channels: a camera image (1, 3 or 4 channels) or a stack of them."""
    return len(shape) == 3 and 1 <= shape[-1] <= MAX_IMAGE_CHANNELS and dtype == torch.uint8


def _per_channel(name: str, values: Sequence[float] | None, channels: int, default: float) -> Tensor:
    """``[channels]`` from one value or one per channel of a frame (repeated over stacked frames)."""
    if values is None:
        return torch.full((channels,), default)
    values = [float(v) for v in values]
    if not values or channels % len(values):
        raise ConfigError(name, values, f"one value, or one per channel of a frame (the image has {channels} "
                          "channels: a list whose length divides it)", f"pass {name}=[{default}]")
    return torch.tensor(values).repeat(channels // len(values))


class FlattenEncoder(Encoder):
    """The observation itself, flattened and as float32 (no parameters): the features of vector observations.

    Args:
        cfg: The encoder's keys (none).
        shape: Per-sample shape.
        dtype: Per-sample dtype.
    """

    def __init__(self, cfg: FlattenEncoderConfig, *, shape: Sequence[int], dtype: torch.dtype = torch.float32) -> None:
        super().__init__()
        self.out_dim = math.prod(shape)
        self.passthrough = len(shape) == 1 and dtype == torch.float32

    def forward(self, x: Tensor) -> Tensor:
        return x.reshape(x.shape[0], self.out_dim).to(torch.float32)


class MLPEncoder(Encoder):
    """An MLP over the flattened observation (e.g. a separate trunk for a privileged key): ``hidden_sizes`` (the
    last one is ``out_dim``) with ``activation`` after each layer.

    Args:
        cfg: The encoder's keys (:class:`~embodirl.config.policies.MLPEncoderConfig`).
        shape: Per-sample shape.
        dtype: Per-sample dtype.
    """

    def __init__(self, cfg: MLPEncoderConfig, *, shape: Sequence[int], dtype: torch.dtype = torch.float32) -> None:
        super().__init__()
        hidden_sizes = list(cfg.hidden_sizes)
        self.in_dim = math.prod(shape)
        self.mlp = nn.Sequential(build_mlp(self.in_dim, hidden_sizes[-1], hidden_sizes[:-1], cfg.activation,
                                           math.sqrt(2.0)), ACTIVATIONS[cfg.activation]())
        self.out_dim = int(hidden_sizes[-1])

    def forward(self, x: Tensor) -> Tensor:
        return self.mlp(x.reshape(x.shape[0], self.in_dim).to(torch.float32))


class CNNEncoder(Encoder):
    """A small convolutional encoder for ``uint8`` images ``[H, W, C]`` (scaled to [0, 1] inside).

    Convolutions with the given channels, kernels and strides (ReLU after each), then a linear layer to
    ``out_dim`` with ReLU. The default is NatureCNN's stack (Mnih et al. 2015), which maps 64x64 to 4x4.
    Pixels are normalised as ``(x / 255 - pixel_mean) / pixel_std`` per channel (``x / 255`` by default).
    ``random_shift > 0`` shifts each image of a batch by up to that many pixels
    (:func:`~embodirl.policies.augmentation.random_shift`) where gradients are computed in training mode, i.e. in
    the update's loss; collecting, evaluating and labelling run without gradients and see the images unchanged.

    Args:
        cfg: The encoder's keys (:class:`~embodirl.config.policies.CNNEncoderConfig`).
        shape: ``(H, W, C)``.
        dtype: ``torch.uint8`` (images); float images are taken as they are.

    Raises:
        ConfigError: ``shape`` is not an image's (key ``shape``), or the stack does not fit it (key ``kernels``).
    """

    in_scale: Tensor  # [1, C, 1, 1]: the input normalisation, x in_scale + in_shift, folded into the first kernel
    in_shift: Tensor

    def __init__(self, cfg: CNNEncoderConfig, *, shape: Sequence[int], dtype: torch.dtype = torch.uint8) -> None:
        super().__init__()
        if len(shape) != 3:
            raise ConfigError("shape", list(shape), "an image shape [H, W, C]", "use this encoder for image keys")
        height, width, in_channels = shape
        layers: list[nn.Module] = []
        for out, kernel, stride in zip(cfg.channels, cfg.kernels, cfg.strides, strict=True):
            conv = nn.Conv2d(in_channels, out, kernel, stride)
            nn.init.orthogonal_(conv.weight, gain=math.sqrt(2.0))
            nn.init.zeros_(typing.cast(Tensor, conv.bias))
            layers += [conv, nn.ReLU()]
            height, width, in_channels = (height - kernel) // stride + 1, (width - kernel) // stride + 1, out
            if height < 1 or width < 1:
                raise ConfigError("kernels", list(cfg.kernels), f"a stack that fits a {shape[0]}x{shape[1]} image",
                                  "use smaller kernels or strides, or a larger image")
        self.convs = nn.Sequential(*layers)
        scale = 1.0 / 255.0 if dtype == torch.uint8 else 1.0
        mean = _per_channel("pixel_mean", cfg.pixel_mean, shape[2], 0.0)
        std = _per_channel("pixel_std", cfg.pixel_std, shape[2], 1.0)
        # (x scale - mean) / std = x (scale / std) - mean / std, per input channel; not saved with the weights
        # (they follow from the config), so checkpoints keep their keys.
        self.register_buffer("in_scale", (scale / std).view(1, -1, 1, 1), persistent=False)
        self.register_buffer("in_shift", (-mean / std).view(1, -1, 1, 1), persistent=False)
        self.random_shift = cfg.random_shift
        head = nn.Linear(in_channels * height * width, cfg.out_dim)
        nn.init.orthogonal_(head.weight, gain=math.sqrt(2.0))
        nn.init.zeros_(head.bias)
        self.head = nn.Sequential(head, nn.ReLU())
        self.out_dim = cfg.out_dim

    def forward(self, x: Tensor) -> Tensor:
        if self.random_shift and self.training and torch.is_grad_enabled():  # the update's loss, never collection
            x = random_shift(x, self.random_shift)
        # [B, H, W, C] -> [B, C, H, W] with channels-last strides (no copy; oneDNN convolves those directly);
        # the normalisation is folded into the first kernel and bias (its convolution has no padding, so this is
        # exact): one pass over the images fewer.
        x = x.permute(0, 3, 1, 2).to(torch.float32)
        first = typing.cast(nn.Conv2d, self.convs[0])
        weight = first.weight * self.in_scale
        bias = typing.cast(Tensor, first.bias) + (first.weight * self.in_shift).sum((1, 2, 3))
        x = F.conv2d(x, weight, bias, first.stride)
        return self.head(self.convs[1:](x).flatten(1))


def default_encoder(shape: tuple[int, ...], dtype: torch.dtype) -> Encoder:
    """A :class:`CNNEncoder` for images, a :class:`FlattenEncoder` for everything else."""
    if is_image(shape, dtype):
        return CNNEncoder(CNNEncoderConfig(), shape=shape, dtype=dtype)
    return FlattenEncoder(FlattenEncoderConfig(), shape=shape, dtype=dtype)
