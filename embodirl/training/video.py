"""Evaluation videos: a grid of a few envs running the deterministic policy, saved with imageio (the settings are
the ``eval.video*`` keys, :class:`~embodirl.config.training.VideoConfig`).

Each env's frame carries an overlay (:func:`annotate`): the step, the return so far and, for envs that report
``success``, whether the episode has succeeded (drawn with Pillow, which imageio and matplotlib already need).
"""

from __future__ import annotations

import functools
import math
import os
import tempfile
from pathlib import Path

import numpy as np

from embodirl.envs.base import BatchedEnv, env_mode
from embodirl.envs.observations import as_tensordict
from embodirl.errors import ConfigError
from embodirl.policies.base import Policy
from embodirl.policies.distributions import chunk_steps

__all__ = ["annotate", "record_episode", "save_video", "tile"]


def tile(frames: np.ndarray) -> np.ndarray:
    """``[k, H, W, 3]`` -> one ``[rows*H, cols*W, 3]`` image, row-major, black where the grid is empty."""
    k, h, w, c = frames.shape
    cols = math.ceil(math.sqrt(k))
    rows = math.ceil(k / cols)
    grid = np.zeros((rows * h, cols * w, c), dtype=frames.dtype)
    for i in range(k):
        r, col = divmod(i, cols)
        grid[r * h:(r + 1) * h, col * w:(col + 1) * w] = frames[i]
    return grid


@functools.cache
def _font(pixels: int):
    from PIL import ImageFont

    try:
        return ImageFont.load_default(size=pixels)
    except (TypeError, ImportError, OSError):  # Pillow without FreeType: its fixed bitmap font
        return ImageFont.load_default()


def annotate(frames: np.ndarray, steps: np.ndarray, returns: np.ndarray, success: np.ndarray | None) -> np.ndarray:
    """Draw ``t <step>  R <return>`` (and ``success`` in green / ``no success`` in red) in each frame's top-left
    corner on a dark band.

    Args:
        frames: ``[k, H, W, 3]`` uint8.
        steps: ``[k]`` steps into each episode.
        returns: ``[k]`` returns so far.
        success: ``[k]`` bool whether each episode has succeeded (None: the env reports no success).

    Returns:
        New ``[k, H, W, 3]`` uint8 frames.
    """
    from PIL import Image, ImageDraw

    k, h, w, _ = frames.shape
    font = _font(max(8, min(h, w) // 14))
    out = np.empty_like(frames)
    for i in range(k):
        image = Image.fromarray(frames[i])
        draw = ImageDraw.Draw(image, "RGBA")
        lines = [(f"t {int(steps[i])}  R {returns[i]:.4g}", (255, 255, 255, 255))]
        if success is not None:
            lines.append(("success", (80, 230, 80, 255)) if success[i] else ("no success", (255, 110, 110, 255)))
        y: float = 1
        for text, colour in lines:
            _, top, right, bottom = draw.textbbox((2, y), text, font=font)
            draw.rectangle((0, top - 1, right + 2, bottom + 1), fill=(0, 0, 0, 150))
            draw.text((2, y), text, fill=colour, font=font)
            y = bottom + 2
        out[i] = np.asarray(image)
    return out


@env_mode()
def record_episode(env: BatchedEnv, policy: Policy, num_envs: int, size: int, seed: int) -> np.ndarray:
    """Run one deterministic episode from a seeded reset and return the tiled frames ``[T+1, H, W, 3]``.

    The first ``num_envs`` envs are drawn, each with its step / return / success overlay (:func:`annotate`);
    each keeps showing its last frame once its episode ended.

    Raises:
        ConfigError: The env cannot render.
    """
    ids = list(range(min(num_envs, env.num_envs)))
    try:
        obs = as_tensordict(env.reset(seed=seed), env.num_envs)
        first = env.render(ids, size)
    except NotImplementedError as exc:
        raise ConfigError("eval.video", True, f"an env that renders frames ({exc})",
                          "pass eval.video=false for this env") from None
    k = len(ids)
    steps, returns, success = np.zeros(k, dtype=np.int64), np.zeros(k), None
    raw = first
    frames = [tile(annotate(raw, steps, returns, success))]
    alive = np.ones(k, dtype=bool)
    state = policy.initial_state(env.num_envs)
    # A chunked policy acts every k steps and its chunk's first k actions run one per step, as in evaluation.
    execute = chunk_steps(policy.dist)
    for t in range(env.max_episode_steps):
        if not execute or t % execute == 0:
            plan, state = policy.mode(obs, state)
        step = env.step(plan[:, t % execute] if execute else plan)
        done = (step.terminated | step.truncated)[:k].cpu().numpy()
        steps += alive
        returns += np.where(alive, step.reward[:k].double().cpu().numpy(), 0.0)
        if "success" in step.info:  # success now (on the last step: at the episode's end, as evaluation counts it)
            now = step.info["success"][:k].cpu().numpy().astype(bool)
            success = now if success is None else np.where(alive, now, success)
        # A finished env has auto-reset, so its current picture is the next episode's start: keep its
        # last picture of the episode instead (with the final step, return and success written on it).
        alive &= ~done
        raw = np.where(alive[:, None, None, None], env.render(ids, size), raw)
        frames.append(tile(annotate(raw, steps, returns, success)))
        obs = as_tensordict(step.obs, env.num_envs)
        if not alive.any():
            break
    return np.stack(frames)


def _umask() -> int:
    """The process's umask (reading it means setting it: it is set straight back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def save_video(frames: np.ndarray, path: str | Path, fps: int) -> Path:
    """Write ``[T, H, W, 3]`` uint8 frames to ``path`` (format from its suffix) atomically, with the permissions of
    any file the user creates (``0666`` less the umask)."""
    import imageio.v2 as imageio

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=path.suffix, dir=path.parent)
    os.close(fd)
    try:
        if path.suffix == ".gif":
            imageio.mimsave(tmp, list(frames), duration=1000 / fps, loop=0)
        else:
            # Even sizes keep every H.264 player happy.
            frames = frames[:, : frames.shape[1] // 2 * 2, : frames.shape[2] // 2 * 2]
            imageio.mimsave(tmp, list(frames), fps=fps, macro_block_size=1)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes it 0600; a video is shared like any file the user writes
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
