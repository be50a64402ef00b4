"""DrQ's random shift (pad, then crop per sample) and the image encoder's normalisation, and that the shift is applied
in the update's loss only."""

import pytest
import torch
from torch.nn import functional as F

from embodirl.config.policies import CNNEncoderConfig
from embodirl.errors import ConfigError
from embodirl.policies.augmentation import random_shift, shift_images
from embodirl.policies.encoders import CNNEncoder, is_image


def test_a_shift_by_hand():
    image = torch.arange(1, 10, dtype=torch.uint8).view(1, 3, 3, 1)  # [[1 2 3] [4 5 6] [7 8 9]]
    # padded by 1 with the border repeated:
    #   1 1 2 3 3
    #   1 1 2 3 3
    #   4 4 5 6 6
    #   7 7 8 9 9
    #   7 7 8 9 9
    def crop(row, col):
        return shift_images(image, torch.tensor([[row, col]]), pad=1)[0, :, :, 0].tolist()

    assert crop(1, 1) == [[1, 2, 3], [4, 5, 6], [7, 8, 9]]  # the centre: the image itself
    assert crop(0, 0) == [[1, 1, 2], [1, 1, 2], [4, 4, 5]]  # the top-left corner: the picture moves down-right
    assert crop(2, 2) == [[5, 6, 6], [8, 9, 9], [8, 9, 9]]
    assert crop(0, 2) == [[2, 3, 3], [2, 3, 3], [5, 6, 6]]


def test_random_shift_is_a_crop_of_the_padded_image_at_one_offset_per_sample():
    generator = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (32, 12, 10, 3), dtype=torch.uint8, generator=generator)
    out = random_shift(images, 4, generator=generator)
    assert out.shape == images.shape and out.dtype == torch.uint8
    padded = F.pad(images.permute(0, 3, 1, 2).float(), (4, 4, 4, 4), mode="replicate").permute(0, 2, 3, 1)
    offsets = []
    for b in range(32):
        hits = [(r, c) for r in range(9) for c in range(9)
                if torch.equal(padded[b, r:r + 12, c:c + 10], out[b].float())]
        assert len(hits) == 1  # every pixel of the sample moved by the same offset
        offsets.append(hits[0])
    assert len(set(offsets)) > 10  # drawn per sample


def _encoder(**keys) -> CNNEncoder:
    torch.manual_seed(0)
    cfg = CNNEncoderConfig(channels=[4], kernels=[3], strides=[1], out_dim=8, **keys)
    return CNNEncoder(cfg, shape=(10, 10, 3), dtype=torch.uint8)


def test_the_shift_applies_in_the_update_only():
    images = torch.randint(0, 256, (16, 10, 10, 3), dtype=torch.uint8)
    plain, drq = _encoder(), _encoder(random_shift=2)
    with torch.no_grad():  # collecting, evaluating, labelling: no gradients, the images as they are
        torch.testing.assert_close(drq(images), plain(images), rtol=0, atol=0)
    drq.eval()
    torch.testing.assert_close(drq(images), plain(images), rtol=0, atol=0)  # evaluation mode, with gradients
    drq.train()
    shifted = drq(images)  # the update's loss: training mode with gradients
    assert shifted.requires_grad and shifted.shape == (16, 8)
    assert not torch.allclose(shifted, plain(images))


def test_pixels_are_normalised_per_channel():
    mean, std = [0.5, 0.25, 0.0], [0.5, 0.25, 2.0]
    images = torch.randint(0, 256, (4, 10, 10, 3), dtype=torch.uint8)
    normalised = _encoder(pixel_mean=mean, pixel_std=std)
    torch.manual_seed(0)
    on_floats = CNNEncoder(CNNEncoderConfig(channels=[4], kernels=[3], strides=[1], out_dim=8), shape=(10, 10, 3),
                           dtype=torch.float32)  # the same weights, fed floats as they are
    by_hand = (images.float() / 255 - torch.tensor(mean)) / torch.tensor(std)
    torch.testing.assert_close(normalised(images), on_floats(by_hand))
    stacked = CNNEncoder(CNNEncoderConfig(channels=[4], kernels=[3], strides=[1], out_dim=8, pixel_mean=mean,
                                          pixel_std=std), shape=(10, 10, 9), dtype=torch.uint8)
    assert stacked.in_shift.flatten().tolist() == pytest.approx([-m / s for m, s in zip(mean, std, strict=True)] * 3)
    assert "in_scale" not in stacked.state_dict()  # follows from the config: checkpoints keep their keys


def test_a_mean_per_channel_must_fit_the_channels():
    with pytest.raises(ConfigError, match=r"pixel_mean=\[0.5, 0.5\] is invalid: expected one value, or one per "
                                          r"channel of a frame \(the image has 3 channels"):
        _encoder(pixel_mean=[0.5, 0.5])


def test_stacked_frames_are_images():
    assert is_image((64, 64, 12), torch.uint8) and is_image((64, 64, 3), torch.uint8)
    assert not is_image((64, 64, 12), torch.float32) and not is_image((64, 64, 65), torch.uint8)
