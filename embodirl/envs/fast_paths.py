"""Speed added to a built env from outside, the way :mod:`embodirl.accel.steps` compiles an algorithm's named steps:
the env's class stays the plain reference (torch only: the physics and the reset) and :func:`add_fast_paths`
swaps faster parts in on the instance. Every fast part computes the numbers the plain one does, bit for bit, so
a run's metrics do not depend on whether it is on.

The build applies :func:`add_fast_paths` to every env it makes; it speeds up :class:`~embodirl.envs.cartpole.CartPole`
and passes other envs through. For CartPole:

* **a memo of the reset starts** (:class:`~embodirl.envs.rng.StartCache` for the env's
  :class:`~embodirl.envs.rng.StartDraws`): the hash behind a start costs more small ops than a step, so eager
  steps read starts drawn for several future episodes at once; compiled or captured steps draw them inline;
* **the eager CPU step in numpy** (:class:`HostStep`), up to :data:`HOST_MAX_ENVS` envs: a step is a few dozen
  element-wise ops on a few hundred numbers, so its cost is the per-call overhead, a fraction of torch's for a
  numpy ufunc. The arithmetic is the env's own :func:`~embodirl.envs.cartpole.euler_step` and
  :func:`~embodirl.envs.cartpole.episode_ends`, on numpy views of its tensors;
* **static buffer addresses on CUDA** (:func:`~embodirl.envs.base.mark_static`), so that
  ``torch.compile(env.step, mode="reduce-overhead")`` replays the step as CUDA graphs instead of skipping them.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from embodirl.envs.base import BatchedEnv, StepResult, mark_static
from embodirl.envs.cartpole import CartPole, episode_ends, euler_step
from embodirl.envs.rng import StartCache, in_graph

__all__ = ["HOST_MAX_ENVS", "HostStep", "add_fast_paths"]

# Eager CPU steps of up to this many envs run in numpy. numpy's ops are cheaper per call but use one thread:
# above it, torch's kernels win once torch has two threads.
HOST_MAX_ENVS = 8192


def add_fast_paths(env: BatchedEnv) -> BatchedEnv:
    """``env`` with its fast paths swapped in (the module docstring lists them); envs without any, and an env
    that has them already, are returned as they are."""
    if isinstance(env, CartPole) and not isinstance(env.starts, StartCache):
        _speed_up_cartpole(env)
    return env


def _speed_up_cartpole(env: CartPole) -> None:
    n, rand = env.num_envs, env.randomization
    # A refill is ~25 small ops whatever N, so small N memoises 64 episodes; the depth keeps a refill's int64
    # working set cache-resident for large N.
    env.starts = StartCache(env.starts.stream, env.starts.draw, dims=(0,) if rand is None else (0, 1),
                            depth=max(1, min(64, (1 << 14) // n)), min_length=1,
                            ranges=None if rand is None else rand.ranges)
    resets = env.starts.stream
    mark_static(env.device, env._state, env._steps, resets.episode, resets.key_hash, env._limits, env._force_right,
                env._force_left, env._zeros)
    if rand is not None:
        mark_static(env.device, rand.values, rand.low, rand.high)
    if env.device.type == "cpu" and n <= HOST_MAX_ENVS and rand is None:
        env.step = HostStep(env)  # type: ignore[method-assign]


class HostStep:
    """:meth:`CartPole.step <embodirl.envs.cartpole.CartPole.step>` in numpy on views of the env's tensors, for
    eager steps on a CPU; a compiled step traces the env's own torch step.

    The views share memory with the tensors, so a reset, a restore or a restart done in torch is seen here and the
    other way round. ``cos``/``sin`` come from the C library's complex exponential (numpy's ``exp`` of a complex
    array is ``cexp``), as in the env's eager CPU step: the same numbers bit for bit.

    Args:
        env: A CartPole without randomization on a CPU.
    """

    def __init__(self, env: CartPole) -> None:
        self.env, self.torch_step = env, env.step
        self.observed = slice(0, None, 2) if env.hide_velocities else slice(None)  # x, theta with hidden velocities
        self.state, self.steps = env._state.numpy(), env._steps.numpy()
        self.limits, self.force_right, self.force_left = (t.numpy() for t in (env._limits, env._force_right,
                                                                              env._force_left))

    def __call__(self, action: Tensor) -> StepResult:
        env = self.env
        if in_graph(env.device):
            return self.torch_step(action)
        env.check_action(action)
        force = np.where((action == 1).numpy(force=True).reshape(env.num_envs), self.force_right, self.force_left)
        trig = np.exp(1j * self.state[:, 2])
        state = euler_step(self.state, force, trig.real, trig.imag, np.stack)
        self.steps += 1
        terminated, truncated, done = episode_ends(state, self.steps, self.limits, env.max_episode_steps)
        final_obs = torch.from_numpy(state[:, self.observed].astype(np.float32))

        (init,) = env.starts.next(torch.from_numpy(done))
        np.copyto(self.state, np.where(done[:, None], init.numpy(), state))
        self.steps[done] = 0
        obs = torch.from_numpy(self.state[:, self.observed].astype(np.float32))

        reward = torch.ones(env.num_envs, dtype=torch.float32)
        return StepResult(obs, reward, torch.from_numpy(terminated), torch.from_numpy(truncated), final_obs, {})
