"""Frames of an evaluation video as one picture: ``num_frames`` frames from first to last, side by side.

A run's videos are the ones ``eval.video=true`` writes: ``videos/eval_<env_steps>.<mp4|gif>`` during training
and ``eval/<date>_<time>/video.<mp4|gif>`` from ``embodirl-eval``. The strip shows the most recent of them.
Videos are read with imageio (its Pillow plugin for GIF, ffmpeg for MP4) and the strip written as PNG by it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

__all__ = ["VIDEO_SUFFIXES", "frame_strip", "latest_video", "pick_frames", "read_video"]

VIDEO_SUFFIXES = (".mp4", ".gif")
GAP = 6  # pixels between two frames
GAP_GREY = 160  # a light grey that parts white frames (CartPole) and coloured ones alike


def latest_video(run_dir: Path) -> Path | None:
    """The evaluation video ``run_dir`` wrote last (by modification time), or None if it wrote none."""
    found = [p for pattern in ("videos/eval_*", "eval/*/video.*") for p in run_dir.glob(pattern)
             if p.suffix in VIDEO_SUFFIXES and p.is_file() and not p.is_symlink()]
    return max(found, key=lambda p: (p.stat().st_mtime, p.name), default=None)


def read_video(path: Path) -> np.ndarray:
    """All frames of a GIF or MP4 as ``[T, H, W, 3]`` uint8.

    Raises:
        ValueError: The file is not a readable video (its message names the file and why).
    """
    import imageio.v3 as iio

    # Only the two plugins that read what save_video writes (a GIF's later frames may be palette-coded).
    options = {"plugin": "pillow", "mode": "RGB"} if path.suffix == ".gif" else {"plugin": "FFMPEG"}
    try:
        frames = [np.asarray(frame)[..., :3] for frame in iio.imiter(path, **options)]
    except Exception as exc:  # imageio raises what its plugin raises: OSError, ValueError, RuntimeError, ...
        raise ValueError(f"{path} is not a readable video ({type(exc).__name__}: {exc})") from None
    if not frames or frames[0].ndim != 3:
        raise ValueError(f"{path} holds no colour frames")
    return np.stack(frames)


def pick_frames(num_total: int, num_frames: int) -> list[int]:
    """Indices of ``num_frames`` frames spread evenly from the first to the last of ``num_total`` (all of them,
    each once, when there are fewer)."""
    if num_total <= num_frames:
        return list(range(num_total))
    return np.linspace(0, num_total - 1, num_frames).round().astype(int).tolist()


def frame_strip(video: Path, num_frames: int = 6) -> bytes:
    """PNG bytes of ``num_frames`` frames of ``video`` (:func:`pick_frames`) in one row, :data:`GAP` grey pixels
    apart, at the video's own resolution.

    Raises:
        ValueError: The video cannot be read.
    """
    import imageio.v3 as iio

    frames = read_video(video)
    picked = frames[pick_frames(len(frames), num_frames)]
    height = picked.shape[1]
    gap = np.full((height, GAP, 3), GAP_GREY, dtype=np.uint8)
    row = [part for frame in picked for part in (gap, frame)][1:]
    return iio.imwrite("<bytes>", np.concatenate(row, axis=1), extension=".png")
