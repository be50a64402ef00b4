"""Batched CartPole on torch tensors with gymnasium ``CartPole-v1`` dynamics, rewards and time limit.

Physics, termination (``|x| > 2.4`` or ``|theta| > 12 deg``), reward (1.0 every step, the terminating
one included), the uniform(-0.05, 0.05) reset distribution and the 500-step limit follow gymnasium's
``CartPoleEnv`` wrapped in ``TimeLimit``, operation by operation (:func:`euler_step`), and eager on the CPU
``cos``/``sin`` come from the C library, as gymnasium's ``math.cos``/``math.sin`` do, so float64 trajectories
equal gymnasium's bit for bit (compiled or on a GPU, torch's ``cos``/``sin`` may differ in the last bit).
One deliberate difference: gymnasium's ``TimeLimit`` also sets ``truncated`` when the last allowed step
terminates; here ``truncated`` excludes ``terminated``, as the :class:`StepResult` contract says.

Reset states come from :func:`hash_uniform`, a pure function of ``(seed, key, counter)``:

* auto-reset of env ``i``: key ``i``, counter = the env's episode counter, so an env's draws depend
  only on its own history, never on ``num_envs``;
* explicit :meth:`CartPole.reset` with ``group_size=g``: key ``i // g`` and counter
  ``2**31 + r`` where ``r`` counts explicit resets since seeding. The offset keeps explicit resets and
  auto-resets in disjoint streams; a group's members share key and counter, hence their state.

``step`` is compile- and CUDA-graph-ready: ``torch.compile(env.step, fullgraph=True)`` traces it without
graph breaks and never recompiles; all env state lives in tensors allocated once and updated in place, and
nothing syncs with the host. Every tensor it returns is freshly allocated, so callers may keep them (inside
a CUDA graph, the graph's static outputs are overwritten by the next replay, as usual).

This class is the plain reference: the physics and the reset, in torch. The build makes it faster from
outside with the same numbers (:mod:`embodirl.envs.fast_paths`: a memo of the reset draws, the eager CPU step in
numpy, static buffer addresses for CUDA graphs).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor

from embodirl.config.envs import CartPoleConfig
from embodirl.envs.base import BatchedEnv, StepResult
from embodirl.envs.randomization import make_randomization
from embodirl.envs.rng import ResetStream, StartDraws, in_graph, uniform_from_key
from embodirl.errors import CheckpointError, check, is_int

__all__ = ["NOMINAL", "CartPole", "Physics", "episode_ends", "euler_step"]

# gymnasium CartPoleEnv constants, computed with the same Python arithmetic (same float64 values).
GRAVITY = 9.8
MASSCART = 1.0
MASSPOLE = 0.1
TOTAL_MASS = MASSPOLE + MASSCART
LENGTH = 0.5  # half the pole's length
POLEMASS_LENGTH = MASSPOLE * LENGTH
FORCE_MAG = 10.0
TAU = 0.02
THETA_THRESHOLD = 12 * 2 * math.pi / 360
X_THRESHOLD = 2.4
RESET_LOW, RESET_HIGH = -0.05, 0.05
_DTYPES = {"float64": torch.float64, "float32": torch.float32}
_STATE_KEYS = {"state", "obs", "steps", "episode", "num_resets", "seed"}


class Physics(NamedTuple):
    """The masses and length of :func:`euler_step`: floats, or ``[N]`` per-env tensors (domain randomization)."""

    masspole: Any = MASSPOLE
    total_mass: Any = TOTAL_MASS
    length: Any = LENGTH  # half the pole's length
    polemass_length: Any = POLEMASS_LENGTH


NOMINAL = Physics()  #: gymnasium's constants


def euler_step(state: Any, force: Any, costheta: Any, sintheta: Any, stack: Callable,
               physics: Physics = NOMINAL) -> Any:
    """One Euler step of 0.02 s of ``[N, 4]`` states (x, x_dot, theta, theta_dot) under ``force`` ``[N]``: the
    operations of gymnasium's ``CartPoleEnv.step`` in its order (bit-identical in float64), on torch tensors
    (``stack=torch.stack``) or numpy arrays (``stack=np.stack``: the fast path) alike; ``physics`` gives the
    masses and length."""
    _, x_dot, _, theta_dot = state.T
    masspole, total_mass, length, polemass_length = physics
    temp = (force + polemass_length * theta_dot**2 * sintheta) / total_mass
    thetaacc = (GRAVITY * sintheta - costheta * temp) / (length * (4.0 / 3.0 - masspole * costheta**2 / total_mass))
    xacc = temp - polemass_length * thetaacc * costheta / total_mass
    return state + stack((x_dot, xacc, theta_dot, thetaacc), 1) * TAU


def episode_ends(state: Any, steps: Any, limits: Any, max_episode_steps: int) -> tuple[Any, Any, Any]:
    """``(terminated, truncated, done)`` ``[N]`` after a step to ``state`` ``[N, 4]``, the ``steps`` into each
    episode counted: terminated beyond a ``limits`` ``[4]`` bound, truncated at the time limit unless terminated;
    on torch tensors or numpy arrays alike."""
    terminated = (abs(state) > limits).any(1)
    time_up = steps >= max_episode_steps
    return terminated, time_up & ~terminated, terminated | time_up


class CartPole(BatchedEnv):
    """``num_envs`` CartPole-v1 copies stepped as tensors on one device.

    ``cfg.max_episode_steps`` sets the step on which ``truncated`` is set; ``cfg.physics_dtype`` float64 reproduces
    gymnasium's numpy state (observations are float32 either way); ``cfg.hide_velocities`` observes only the cart
    position and pole angle ``[N, 2]`` (a partially observed task: a memoryless policy cannot tell which way the
    pole is falling; a recurrent one can).

    Args:
        cfg: The env's keys (:class:`~embodirl.config.envs.CartPoleConfig`).
        device: Device of every tensor.
        seed: Seed of the reset-state stream (see the module docstring).
    """

    solved_threshold = 475.0

    def __init__(self, cfg: CartPoleConfig, *, device: str | torch.device = "cpu", seed: int = 0) -> None:
        num_envs, hide_velocities = cfg.num_envs, cfg.hide_velocities
        self.num_envs = num_envs
        self.max_episode_steps = cfg.max_episode_steps
        self.control_dt = TAU  # seconds per step: an export's manifest and the videos' frame rate read it
        self.device = torch.device(device)
        self.physics_dtype = _DTYPES[cfg.physics_dtype]
        self.hide_velocities = hide_velocities
        observed = [0, 2] if hide_velocities else [0, 1, 2, 3]
        high = np.array([X_THRESHOLD * 2, np.inf, THETA_THRESHOLD * 2, np.inf], dtype=np.float32)[observed]
        self.observation_space = gym.spaces.Box(-high, high, dtype=np.float32)
        self.action_space = gym.spaces.Discrete(2)

        n, dev, dtype = num_envs, self.device, self.physics_dtype
        nominal = {"pole_length": LENGTH, "pole_mass": MASSPOLE, "cart_mass": MASSCART, "force_mag": FORCE_MAG}
        self.randomization = make_randomization(cfg.randomize, nominal, n, dev, dtype, cfg.randomizable)
        if self.randomization is not None:  # each episode's values are logged as episode/metrics/randomize/<name>
            self.info_metrics = self.randomization.metric_keys
        self._limits = torch.tensor([X_THRESHOLD, math.inf, THETA_THRESHOLD, math.inf], dtype=dtype, device=dev)
        self._force_right = torch.full((n,), FORCE_MAG, dtype=dtype, device=dev)
        self._force_left = torch.full((n,), -FORCE_MAG, dtype=dtype, device=dev)
        self._state = torch.zeros(n, 4, dtype=dtype, device=dev)  # x, x_dot, theta, theta_dot
        self._zeros = torch.zeros(n, dtype=dtype, device=dev)
        self._steps = torch.zeros(n, dtype=torch.int64, device=dev)  # steps into the current episode
        self._resets = ResetStream(n, dev, seed)  # seed and episode counters of the reset stream
        self.starts = StartDraws(self._resets, self._draw_starts)  # each auto-reset's start state, drawn then
        self.reset(seed=seed)

    @property
    def seed(self) -> int:
        """Seed of the reset stream (set by ``reset(seed=...)``)."""
        return self._resets.seed

    def reset(self, seed: int | None = None, group_size: int = 1) -> Tensor:
        """Start a fresh episode in every env (see :meth:`BatchedEnv.reset`).

        Args:
            seed: New stream seed (counters restart from zero); None continues the stream.
            group_size: Envs ``[k*g, (k+1)*g)`` start from one shared state per group.

        Returns:
            ``[N, 4]`` float32 first observations (``[N, 2]`` with ``hide_velocities``).
        """
        state, *params = self._draw_starts(*self._resets.explicit(seed, group_size))
        self._state.copy_(state)
        self._reset_starts = (state, *params)  # what restart() returns envs to
        if self.randomization is not None:
            self.randomization.values.copy_(params[0])
        self._steps.zero_()
        return self._observe(self._state)

    def restart(self, mask: Tensor) -> Tensor:
        """Start the ``mask`` envs over from the last :meth:`reset`'s state (see :meth:`BatchedEnv.restart`)."""
        state, *params = self._reset_starts
        torch.where(mask.unsqueeze(1), state, self._state, out=self._state)
        if self.randomization is not None:
            torch.where(mask, params[0], self.randomization.values, out=self.randomization.values)
        self._steps.masked_fill_(mask, 0)
        return self._observe(self._state)

    def _observe(self, state: Tensor) -> Tensor:
        """A fresh float32 observation of ``state`` (never the state buffer itself, even with float32 physics)."""
        if self.hide_velocities:
            return state[:, 0::2].to(torch.float32, copy=True)  # x, theta
        return state.to(torch.float32, copy=True)

    def _draw_starts(self, key_hash: Tensor, counter: Tensor) -> tuple[Tensor, ...]:
        """``[M, 4]`` start states of rows ``(key_hash, counter)`` in the physics dtype (and ``[P, M]`` randomized
        parameters with ``env.randomize``)."""
        state = uniform_from_key(key_hash, counter, 4, RESET_LOW, RESET_HIGH).to(self.physics_dtype)
        return (state,) if self.randomization is None else (state, self.randomization.draw(key_hash, counter))

    def step(self, action: Tensor) -> StepResult:
        """Advance every env by one Euler step of 0.02 s and auto-reset the finished ones.

        Args:
            action: ``[N]`` or ``[N, 1]``; 1 pushes right, anything else left (int64, float or bool).

        Returns:
            :class:`StepResult` with ``[N, 4]`` (``[N, 2]``) float32 observations and ``[N]`` reward and flags.
        """
        self.check_action(action)
        physics, force_right, force_left = self._physics()
        force = torch.where(action.view(self.num_envs) == 1, force_right, force_left)
        state = euler_step(self._state, force, *self._cos_sin(self._state[:, 2]), torch.stack, physics)
        self._steps += 1
        terminated, truncated, done = episode_ends(state, self._steps, self._limits, self.max_episode_steps)
        final_obs = self._observe(state)

        init, *params = self.starts.next(done)
        info = {}
        if self.randomization is not None:  # the ended episodes' values go into info, then the new ones are drawn
            info = self.randomization.info()
            torch.where(done, params[0], self.randomization.values, out=self.randomization.values)
        torch.where(done.unsqueeze(1), init, state, out=self._state)
        self._steps.masked_fill_(done, 0)
        obs = self._observe(self._state)

        reward = torch.ones(self.num_envs, dtype=torch.float32, device=self.device)
        return StepResult(obs, reward, terminated, truncated, final_obs, info)

    def check_action(self, action: Tensor) -> None:
        """Raise ValueError unless ``action`` holds one action per env: ``[N]`` or ``[N, 1]``."""
        if action.shape != self._state.shape[:1] and action.shape != (self.num_envs, 1):
            raise ValueError(f"CartPole.step: action has shape {tuple(action.shape)}, expected ({self.num_envs},) "
                             f"or ({self.num_envs}, 1): one action per env")

    def _physics(self) -> tuple[Physics, Tensor, Tensor]:
        """:class:`Physics` and the right and left forces ``[N]`` of this step: gymnasium's, or the per-env
        randomized values."""
        rand = self.randomization
        if rand is None:
            return NOMINAL, self._force_right, self._force_left
        masspole, length = rand.row("pole_mass", MASSPOLE), rand.row("pole_length", LENGTH)
        total_mass = masspole + rand.row("cart_mass", MASSCART)
        force = rand.row("force_mag", FORCE_MAG)
        if not isinstance(force, Tensor):
            return Physics(masspole, total_mass, length, masspole * length), self._force_right, self._force_left
        return Physics(masspole, total_mass, length, masspole * length), force, -force

    def _cos_sin(self, theta: Tensor) -> tuple[Tensor, Tensor]:
        if self.device.type == "cpu" and not in_graph(self.device):
            # exp(i*theta) = cos + i*sin by the C library's cexp, whose cos/sin are those of gymnasium's math.cos and
            # math.sin; torch's own cos/sin (SLEEF) can differ from them by one ulp.
            cos, sin = torch.view_as_real(torch.exp(torch.complex(self._zeros, theta))).unbind(1)
            return cos, sin
        return torch.cos(theta), torch.sin(theta)

    def render(self, env_ids: list[int] | None = None, size: int = 256) -> np.ndarray:
        """Side views of the given envs (all when None) as uint8 ``[k, size, size, 3]`` (:func:`draw_cartpole`);
        after an auto-reset, the next episode's start."""
        check(is_int(size) and size >= 8, "size", size, "an int >= 8 (pixels)")
        ids = list(range(self.num_envs)) if env_ids is None else list(env_ids)
        index = torch.as_tensor(ids, dtype=torch.int64, device=self.device)
        return draw_cartpole(self._state[index].to(torch.float32), size).cpu().numpy()

    def state_dict(self) -> dict[str, Tensor]:
        """Physics, counters, seed and episode statistics (all cloned), and the current observation (for reference:
        it follows from ``state``, and :meth:`load_state_dict` ignores it)."""
        state = {"state": self._state.clone(), "obs": self._observe(self._state),
                 "steps": self._steps.clone()}
        state.update(self._resets.state_dict())
        if self.randomization is not None:
            state.update(self.randomization.state_dict())
        return state

    def load_state_dict(self, state: dict[str, Tensor]) -> None:
        """Restore :meth:`state_dict` output; the env then continues bit-identically."""
        missing = sorted(_STATE_KEYS - state.keys())
        if missing:
            raise CheckpointError(f"CartPole.load_state_dict: missing keys {missing}; pass a CartPole.state_dict()")
        if tuple(state["state"].shape) != tuple(self._state.shape):
            raise CheckpointError(f"CartPole.load_state_dict: state has shape {tuple(state['state'].shape)}, this env "
                                  f"has {tuple(self._state.shape)}; build the env with the checkpoint's num_envs")
        self._resets.load_state_dict(state)
        self._state.copy_(state["state"])
        self._steps.copy_(state["steps"])
        if self.randomization is not None:
            self.randomization.load_state_dict(state)


# Picture proportions of gymnasium's CartPole renderer, in world units (its 600 px span 4.8 m).
_CART_WIDTH, _CART_HEIGHT, _POLE_WIDTH = 0.4, 0.24, 0.08
_TRACK_Y = 0.7  # track height as a fraction of the frame, from the top
_CART_RGB, _POLE_RGB, _AXLE_RGB = (0, 0, 0), (202, 152, 101), (129, 132, 203)


def draw_cartpole(state: Tensor, size: int) -> Tensor:
    """Draw CartPoles side by side in one batch of tensor ops (no display, any device).

    The frame spans the track's ``[-2.4, 2.4]`` m; the track is a line, the cart a black box on it, the pole
    (1 m) a brown bar pivoting on the cart's blue axle, leaning right for ``theta > 0``.

    Args:
        state: ``[k, 4]`` (x, x_dot, theta, theta_dot).
        size: Pixels per side of each square frame.

    Returns:
        ``[k, size, size, 3]`` uint8 frames on ``state``'s device.
    """
    k, dev = state.shape[0], state.device
    scale = size / (2 * X_THRESHOLD)  # pixels per metre
    centres = torch.arange(size, device=dev, dtype=torch.float32) + 0.5
    ys, xs = centres.view(1, size, 1), centres.view(1, 1, size)
    x, theta = state[:, 0].view(k, 1, 1) * scale + size / 2, state[:, 2].view(k, 1, 1)
    track_y = size * _TRACK_Y
    cart_y = track_y - _CART_HEIGHT * scale / 2
    track = (ys - track_y).abs() <= max(0.5, size / 256)
    cart = ((xs - x).abs() <= _CART_WIDTH * scale / 2) & ((ys - cart_y).abs() <= _CART_HEIGHT * scale / 2)
    axle_y = cart_y - _CART_HEIGHT * scale / 4
    # Distance of each pixel from the pole's segment axle -> axle + L (sin theta, -cos theta) (image y points down).
    dx, dy = xs - x, ys - axle_y
    ux, uy = theta.sin(), -theta.cos()
    along = (dx * ux + dy * uy).clamp(0.0, 2 * LENGTH * scale)
    pole = (dx - along * ux).square() + (dy - along * uy).square() <= (_POLE_WIDTH * scale / 2) ** 2
    axle = dx.square() + dy.square() <= (_POLE_WIDTH * scale / 2) ** 2
    frames = torch.full((k, size, size, 3), 255, dtype=torch.uint8, device=dev)
    for mask, rgb in ((track | cart, _CART_RGB), (pole, _POLE_RGB), (axle, _AXLE_RGB)):
        frames[mask.expand(k, size, size)] = torch.tensor(rgb, dtype=torch.uint8, device=dev)
    return frames
