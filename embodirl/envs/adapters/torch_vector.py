"""Adapter for gymnasium-style vector simulators that already return batched torch tensors (ManiSkill3, Isaac Lab).

The simulator is built by ``make(num_envs=N)`` and driven through its own API: ``reset(seed=...) -> (obs, info)``
and ``step(action) -> (obs, reward, terminated, truncated, info)``, every value a ``[N, ...]`` tensor (or a
nested dict of them) on the simulator's device, finished envs reset inside ``step``. The adapter renames, it
does not copy: inside :meth:`TorchVectorEnv.step` tensors stay on the device (no ``.cpu()``, ``.item()``,
``.numpy()`` or data-dependent branch), so a GPU simulator's step stays on the GPU.

How ManiSkill3's ``ManiSkillVectorEnv`` (``mani_skill/vector/wrappers/gymnasium.py``) maps onto the contract
of :class:`~embodirl.envs.base.BatchedEnv`:

=====================================================  ==========================================================
ManiSkill3                                             embodirl
=====================================================  ==========================================================
``single_observation_space`` (Box or nested Dict)      ``observation_space``; a Dict becomes a TensorDict per leaf
                                                       (``agent.qpos``, ``sensor_data.base_camera.rgb`` uint8)
``single_action_space``                                ``action_space``; Box actions are clipped to its bounds
``spec.max_episode_steps``                             ``max_episode_steps`` (``env.max_episode_steps`` overrides)
``obs`` returned by ``step``                           ``StepResult.obs`` (next episode's first where one ended)
``info["final_observation"]`` where                    ``StepResult.final_obs`` (elsewhere ``obs``)
``info["_final_observation"]``
``terminated``, ``truncated`` (both may be true)       ``terminated``; ``truncated & ~terminated``
``info["success"]``; ``info["final_info"]["success"]``  ``info["success"]`` [N] bool; the finished step's value
where ``info["_final_info"]``                          where an episode ended; solved at ``eval/success_rate`` 0.9
``info["elapsed_steps"]``, ``info["_elapsed_steps"]``  not used: the collector counts episode lengths
``info["episode"]`` (``record_metrics=True``)          not used: the collector keeps episode statistics
``reset(seed=[s_0, ..., s_N-1])``                      group-shared starts for GRPO (``per_env_seeds=True``)
=====================================================  ==========================================================

Gymnasium >= 1.0 vector envs in ``SAME_STEP`` autoreset mode name the final observation ``info["final_obs"]``
(mask ``info["_final_obs"]``); both names are read. Isaac Lab's ``ManagerBasedRLEnv``/``DirectRLEnv`` follow the
same ``reset``/``step`` signatures (``step`` returns ``terminated`` and ``time_outs``), observations a dict of
groups (``{"policy": ..., "critic": ...}``: pass ``policy.actor_keys=[policy] policy.critic_keys=[critic]``), and
differ in three ways: no final observation (``final_obs="acted_on"`` bootstraps a time-out from the observation
the env acted on at its last step, as rsl_rl does), no ``success`` (set ``solved_threshold`` for the return), and
``reset(seed=int)`` seeds the whole process, so no group-shared starts (``per_env_seeds=False``); the episode
limit is ``max_episode_length``.
"""

from __future__ import annotations

import inspect
import logging
import typing
from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from hydra.utils import instantiate
from tensordict import TensorDict
from torch import Tensor

from embodirl.config.envs import TorchVectorConfig
from embodirl.config.instantiate import import_callable
from embodirl.envs.base import BatchedEnv, StepResult
from embodirl.envs.observations import STATE_KEY, ObsKey, key_name, observation_spec
from embodirl.errors import ConfigError, check, is_int

__all__ = ["TorchVectorEnv"]

log = logging.getLogger(__name__)

# ManiSkill3's, then gymnasium 1.x's names of the final observation and its mask
_FINAL_OBS_KEYS = (("final_observation", "_final_observation"), ("final_obs", "_final_obs"))
_EXAMPLE = "see the ManiSkill3 example in conf/env/torch_vector.yaml"
DEFAULT_SUCCESS_THRESHOLD = 0.9  #: eval/success_rate that counts as solved when the simulator reports success



def _sim_seed(seed: int) -> int:
    """A 31-bit seed derived from any int (ManiSkill3 seeds numpy's RandomState, which takes < 2**32)."""
    return int(np.random.SeedSequence(seed % 2**64).generate_state(1)[0] >> 1)


def _attribute(sim: Any, name: str) -> Any:
    """``sim.name``, else the unwrapped env's (gymnasium wrappers do not forward every attribute); None if absent."""
    value = getattr(sim, name, None)
    if value is None and getattr(sim, "unwrapped", sim) is not sim:
        value = getattr(sim.unwrapped, name, None)
    return value


def _leaf(tree: Any, key: ObsKey) -> Any:
    for part in key:
        tree = tree[part]
    return tree


def _has_leaf(tree: Any, key: ObsKey) -> bool:
    try:
        _leaf(tree, key)
    except (KeyError, TypeError, IndexError):
        return False
    return True


def _check_arguments(factory: Any, target: str, names: list[str]) -> None:
    """Refuse keyword arguments ``factory`` cannot take (when its signature says so), naming the key."""
    try:
        params = inspect.signature(factory).parameters
    except (TypeError, ValueError):  # no introspectable signature: let the call decide
        return
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return
    valid = [n for n, p in params.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    for name in names:
        if name not in params:
            if name == "num_envs":
                raise ConfigError("make", target, "a constructor that takes num_envs", "wrap it in a function "
                                  "make(num_envs, ...) that passes the count on, and name that function")
            raise ConfigError(f"make.{name}", name, f"a keyword argument of {target} (one of: {', '.join(valid)})",
                              f"remove env.make.{name} or correct its spelling")


_HYDRA_KEYS = ("_target_", "_partial_", "_convert_", "_recursive_")


def build_simulator(make: str | Mapping[str, Any] | None, num_envs: int) -> Any:
    """Call the simulator's constructor named by ``make`` with ``num_envs=num_envs``.

    Args:
        make: An import path (``"mypkg.sims.make_env"``), or a mapping with ``_target_`` (the import path) whose
            other keys are keyword arguments (nested ``_target_`` nodes among them are instantiated first).
        num_envs: Number of parallel envs.

    Raises:
        ConfigError: ``make`` is missing, cannot be imported, does not take ``num_envs`` or an argument given.
    """
    expected = "the simulator's vector-env constructor: an import path or a _target_ node (called with num_envs=N)"
    if isinstance(make, str):
        key, target, kwargs = "make", make, {}
    elif isinstance(make, Mapping) and isinstance(make.get("_target_"), str):
        key, target = "make._target_", make["_target_"]
        kwargs = {k: v for k, v in make.items() if k not in _HYDRA_KEYS}
    else:
        raise ConfigError("make", make, expected, f"pass env.make=mypkg.make_sim, or {_EXAMPLE}")
    check("num_envs" not in kwargs, "make.num_envs", kwargs.get("num_envs"), "absent: env.num_envs sets it",
          "remove env.make.num_envs and set env.num_envs")
    factory = import_callable(key, target, expected, f"install the simulator's package or correct the path; "
                              f"{_EXAMPLE}")
    _check_arguments(factory, target, [*kwargs, "num_envs"])
    if kwargs:
        kwargs = instantiate(kwargs, _convert_="all")
    return factory(num_envs=num_envs, **kwargs)


class TorchVectorEnv(BatchedEnv):
    """A torch-batched vector simulator (ManiSkill3, Isaac Lab, ...) behind the batched-env contract.

    The keys (:class:`~embodirl.config.envs.TorchVectorConfig`): ``make`` is the simulator's constructor, called
    with ``num_envs=N``: an import path, or a ``_target_`` mapping whose other keys are its keyword arguments (e.g.
    ManiSkill3's ``ManiSkillVectorEnv`` with ``env: PushCube-v1``); it must return an object with
    ``reset``/``step`` as described in the module docstring that resets finished envs itself.
    ``max_episode_steps`` None reads ``spec.max_episode_steps`` (ManiSkill3, gymnasium) or ``max_episode_length``
    (Isaac Lab). ``solved_threshold`` None: 0.9 success rate when the simulator reports success, else
    ``spec.reward_threshold`` (None: never). ``success_key`` names the info key of the per-env success flags; the
    env reports success when the reset's info has it. ``final_obs`` says where the true last observation of a
    finished episode comes from: ``"info"`` (ManiSkill3 and gymnasium: ``info["final_observation"]`` or
    ``info["final_obs"]``) or ``"acted_on"`` (simulators that return none, like Isaac Lab: the observation the
    env acted on at its last step). ``per_env_seeds``: the simulator's ``reset(seed=[s_0, ..., s_N-1])`` starts
    env ``i`` from a state that depends on ``s_i`` alone, so envs given equal seeds start equal (GRPO's
    group-shared resets need it; checked on the first observations at every group reset).

    Args:
        cfg: The env's keys.
        device: Device the simulator's tensors are on (checked at construction).
        seed: Seed of the first reset.
    """

    def __init__(self, cfg: TorchVectorConfig, *, device: str | torch.device = "cpu", seed: int = 0) -> None:
        num_envs = self.num_envs = cfg.num_envs
        self.device = torch.device(device)
        check(self.device.type != "cuda" or torch.cuda.is_available(), "device", str(self.device),
              "a device this machine has (torch sees no CUDA device)", "pass device=cpu")
        self.success_key, self.final_obs_source, self.per_env_seeds = cfg.success_key, cfg.final_obs, cfg.per_env_seeds
        self._sim = build_simulator(cfg.make, num_envs)
        try:
            self._read_simulator(cfg.max_episode_steps)
            self.seed, self._num_resets = seed, 0
            info = self._reset(_sim_seed(seed))
        except ConfigError:
            self.close()
            raise
        self._reports_success = cfg.success_key is not None and cfg.success_key in info
        self.info_metrics = tuple(cfg.info_metrics)
        self._unseen_info = set(self.info_metrics) - set(info)  # refused after the first step if still unseen
        self.solved_metric = "eval/success_rate" if self._reports_success else "eval/return_mean"
        spec = _attribute(self._sim, "spec")
        default = DEFAULT_SUCCESS_THRESHOLD if self._reports_success else getattr(spec, "reward_threshold", None)
        self.solved_threshold = default

    def _read_simulator(self, max_episode_steps: int | None) -> None:
        """Spaces, episode limit and auto-reset from the simulator, each refused with a fix when unusable."""
        sim = self._sim
        size = _attribute(sim, "num_envs")
        check(size is None or size == self.num_envs, "num_envs", self.num_envs,
              f"the number of envs the simulator made ({size})", "check how make passes num_envs on")
        check(_attribute(sim, "auto_reset") is not False, "make.auto_reset", False,
              "true: embodirl's envs reset finished episodes inside step", "pass env.make.auto_reset=true")
        self._refuse_gymnasium_vector(sim)
        obs_space = _attribute(sim, "single_observation_space")
        try:
            self._spec = observation_spec(obs_space)
        except ConfigError:
            raise ConfigError("make", type(sim).__name__, "a simulator whose single_observation_space is a Box or a "
                              f"(nested) Dict of Boxes, not {obs_space}", _EXAMPLE) from None
        self._box = isinstance(obs_space, gym.spaces.Box)
        self.observation_space = obs_space
        act_space = _attribute(sim, "single_action_space")
        check(isinstance(act_space, (gym.spaces.Box, gym.spaces.Discrete)), "make", type(sim).__name__,
              f"a simulator whose single_action_space is a Box or Discrete, not {act_space}", _EXAMPLE)
        self.action_space = act_space
        self.action_start = int(act_space.start) if isinstance(act_space, gym.spaces.Discrete) else 0
        self._action_low = self._action_high = None
        bounded = isinstance(act_space, gym.spaces.Box) and bool(np.isfinite(act_space.low).any()
                                                                 | np.isfinite(act_space.high).any())
        if bounded:
            self._action_low = torch.as_tensor(act_space.low, dtype=torch.float32, device=self.device)
            self._action_high = torch.as_tensor(act_space.high, dtype=torch.float32, device=self.device)
        spec = _attribute(sim, "spec")
        limit = max_episode_steps or getattr(spec, "max_episode_steps", None) or _attribute(sim, "max_episode_length")
        check(limit is not None, "max_episode_steps", max_episode_steps,
              "an int >= 1: the simulator states no episode limit (spec.max_episode_steps or max_episode_length)",
              "pass env.max_episode_steps=<its time limit>")
        self.max_episode_steps = int(limit)

    @staticmethod
    def _refuse_gymnasium_vector(sim: Any) -> None:
        """Refuse gymnasium vector envs this adapter would mis-step: a ``NextStep``/``Disabled`` one (its reset step
        would become a zero-reward transition of every episode) and a ``SameStep`` one made torch by an array
        conversion (``NumpyToTorch`` fails on the object array of final observations). ``env=gym_vector`` runs both."""
        metadata = getattr(sim, "metadata", None)
        mode = metadata.get("autoreset_mode") if isinstance(metadata, Mapping) else None
        if mode is None:
            return
        mode = getattr(mode, "value", mode)
        fix = "select env=gym_vector and pass the same constructor as env.make (it handles gymnasium's autoreset modes)"
        check(mode == gym.vector.AutoresetMode.SAME_STEP.value, "make", type(sim).__name__,
              f"a simulator that resets finished envs inside the step that ends them; this gymnasium vector env "
              f"states autoreset_mode {mode}, whose reset step would be stored as a transition", fix)
        inner = sim
        while isinstance(inner, gym.vector.VectorWrapper):
            check(not isinstance(inner, gym.wrappers.vector.ArrayConversion), "make", type(sim).__name__,
                  f"a simulator that returns its final observations as tensors; gymnasium's {type(inner).__name__} "
                  "fails on SameStep's info['final_obs'] (one observation per env in an object array)", fix)
            inner = inner.env

    # --- reset ------------------------------------------------------------------------------------------
    def reset(self, seed: int | None = None, group_size: int = 1) -> Tensor | TensorDict:
        """Reset every env (see :meth:`BatchedEnv.reset`).

        ``seed`` reaches the simulator as a 31-bit seed derived from it; None lets the simulator continue its
        own stream. With ``group_size > 1`` every env gets its own seed, equal within a group, drawn from
        ``(seed, number of resets since seeding)`` (needs ``per_env_seeds``).

        Returns:
            The first observations: ``[N, *shape]`` for a Box space, else a TensorDict with batch ``[N]``.

        Raises:
            ConfigError: ``group_size > 1`` for a simulator without per-env seeds, or whose group members did not
                start equal.
        """
        check(seed is None or is_int(seed), "seed", seed, "an int or None")
        check(is_int(group_size) and group_size >= 1 and self.num_envs % group_size == 0, "group_size", group_size,
              f"an int >= 1 that divides num_envs={self.num_envs}", "pick a divisor of num_envs, e.g. group_size=1")
        if group_size > 1 and not self.per_env_seeds:
            raise ConfigError("algo.group_shared_reset", True, "false with this simulator: group members can start "
                              "from one state only if it seeds each env separately (env.per_env_seeds=true)",
                              "pass algo.group_shared_reset=false, or env.per_env_seeds=true if the simulator's "
                              "reset(seed=[s_0, ..., s_N-1]) starts envs with equal seeds from equal states",
                              absolute=True)
        if seed is not None:
            self.seed, self._num_resets = seed, 0
        self._num_resets += 1
        if group_size > 1:
            rng = np.random.default_rng([self.seed % 2**64, self._num_resets])
            seeds = np.repeat(rng.integers(0, 2**31, size=self.num_envs // group_size), group_size).tolist()
            self._reset(seeds)
            self._check_groups(group_size)
        else:
            self._reset(None if seed is None else _sim_seed(seed))
        return self._last_obs

    def _reset(self, seed: int | list[int] | None) -> dict[str, Any]:
        obs, info = self._sim.reset(seed=seed)
        for key, leaf in self._leaves(obs).items():
            if not isinstance(leaf, Tensor):
                raise TypeError(f"{type(self._sim).__name__}.reset returned {type(leaf).__name__} for observation "
                                f"{key_name(key)!r}; this adapter takes simulators that return torch tensors")
            if leaf.device != self.device:
                raise ConfigError("device", str(self.device), f"the device the simulator returns tensors on "
                                  f"({leaf.device}, observation {key_name(key)!r})", f"pass device={leaf.device}")
        last = self._observation(obs)
        self._last_obs = last.clone() if self.final_obs_source == "acted_on" else last
        return info

    def _check_groups(self, group_size: int) -> None:
        """Refuse ``per_env_seeds`` when envs of one group got different first observations (one host sync)."""
        obs = self._last_obs
        for key in self._spec:
            leaf = obs if isinstance(obs, Tensor) else obs.get(key)
            grouped = leaf.reshape(self.num_envs // group_size, group_size, -1).to(torch.float32)
            if not torch.allclose(grouped, grouped[:, :1].expand_as(grouped), rtol=1e-5, atol=1e-5):
                raise ConfigError("env.per_env_seeds", True, "a simulator whose reset(seed=[...]) starts envs given "
                                  f"equal seeds from equal states; envs of one group got different {key_name(key)!r}",
                                  "pass env.per_env_seeds=false and algo.group_shared_reset=false", absolute=True)

    # --- step -------------------------------------------------------------------------------------------
    def step(self, action: Tensor) -> StepResult:
        """Step the simulator once; it resets finished envs itself. No host synchronisation.

        Args:
            action: ``[N, *act_shape]`` floats (clipped to the Box bounds) or ``[N]`` Discrete indices.

        Returns:
            :class:`StepResult`; ``info["success"]`` ``[N]`` bool when the simulator reports success.
        """
        if self._action_low is not None:
            action = torch.clamp(action, self._action_low, self._action_high)
        elif self.action_start:
            action = action + self.action_start
        obs, reward, terminated, truncated, info = self._sim.step(action)
        next_obs = self._observation(obs)
        terminated = terminated if terminated.dtype == torch.bool else terminated.to(torch.bool)
        truncated = (truncated if truncated.dtype == torch.bool else truncated.to(torch.bool)) & ~terminated
        done = terminated | truncated
        final_obs = self._final_observation(info, done, next_obs)
        extra = {"success": self._success(info, done)} if self._reports_success else {}
        if self.info_metrics:
            extra.update(self._info_metrics(info, done))
        if self.final_obs_source == "acted_on":  # the simulator may reuse its buffers: keep a copy
            self._last_obs = next_obs.clone()
        reward = reward if reward.dtype == torch.float32 else reward.to(torch.float32)
        return StepResult(next_obs, reward, terminated, truncated, final_obs, extra)

    def _observation(self, obs: Any) -> Tensor | TensorDict:
        """The simulator's observation as the contract's: a tensor for a Box space, else a TensorDict per leaf."""
        if self._box and isinstance(obs, Tensor):
            dtype = self._spec[(STATE_KEY,)][1]
            return obs if obs.dtype == dtype else obs.to(dtype)
        out = TensorDict({}, batch_size=[self.num_envs], device=self.device)
        for key, leaf in self._leaves(obs).items():
            dtype = self._spec[key][1]
            out.set(key, leaf if leaf.dtype == dtype else leaf.to(dtype))
        return out

    def _leaves(self, obs: Any) -> dict[ObsKey, Any]:
        """``{key: value}`` of every leaf the observation space names (a Box space's tensor is ``"state"``)."""
        if self._box:
            return {(STATE_KEY,): obs}
        try:
            return {key: _leaf(obs, key) for key in self._spec}
        except (KeyError, TypeError, IndexError):
            missing = next(key for key in self._spec if not _has_leaf(obs, key))
            raise TypeError(f"{type(self._sim).__name__} returned an observation without {key_name(missing)!r}, "
                            "which its single_observation_space has") from None

    def _final_observation(self, info: Mapping[str, Any], done: Tensor, next_obs: Tensor | TensorDict) -> Any:
        for key, mask_key in _FINAL_OBS_KEYS:
            if key in info:
                return self._select(info.get(mask_key, done), self._observation(info[key]), next_obs)
        if self.final_obs_source == "acted_on":
            return self._select(done, self._last_obs, next_obs)
        return next_obs

    def _select(self, mask: Tensor, where_true: Tensor | TensorDict, elsewhere: Tensor | TensorDict) -> Any:
        """Per env: ``where_true`` where ``mask``, else ``elsewhere`` (both shaped like an observation)."""
        if isinstance(elsewhere, Tensor):
            return torch.where(mask.view(-1, *[1] * (elsewhere.dim() - 1)), where_true, elsewhere)
        out = TensorDict({}, batch_size=[self.num_envs], device=self.device)
        observation = typing.cast(TensorDict, where_true)  # shaped like elsewhere: a TensorDict too
        for key in self._spec:
            a, b = observation.get(key), elsewhere.get(key)
            out.set(key, torch.where(mask.view(-1, *[1] * (b.dim() - 1)), a, b))
        return out

    @staticmethod
    def _finished_value(key: str, info: Mapping[str, Any], done: Tensor) -> Tensor | None:
        """``info[key]``, with the finished step's value (``final_info``) where an episode ended; None if absent."""
        value = info.get(key)
        final_info = info.get("final_info")
        if isinstance(final_info, Mapping) and key in final_info:
            ended = final_info[key]
            value = ended if value is None else torch.where(info.get("_final_info", done), ended, value)
        return value

    def _info_metrics(self, info: Mapping[str, Any], done: Tensor) -> dict[str, Tensor]:
        """``{key: [N] float32}`` of ``env.info_metrics`` (0 where the step's info lacks one); a key that neither the
        reset's nor the first step's info has is refused."""
        final_info = info.get("final_info")
        self._unseen_info.difference_update(info, final_info if isinstance(final_info, Mapping) else ())
        if self._unseen_info:
            missing = sorted(self._unseen_info)[0]
            present = ", ".join(sorted(k for k in info if not k.startswith(("_", "final_")))) or "none"
            raise ConfigError("env.info_metrics", missing, f"a key of the info {type(self._sim).__name__} returns "
                              f"(its first step's has: {present})", f"remove {missing} from env.info_metrics, or "
                              "correct its spelling", absolute=True)
        out = {}
        for key in self.info_metrics:
            value = self._finished_value(key, info, done)
            out[key] = (torch.zeros(self.num_envs, device=self.device) if value is None
                        else value.reshape(self.num_envs).to(torch.float32))
        return out

    def _success(self, info: Mapping[str, Any], done: Tensor) -> Tensor:
        """``[N]`` bool: the finished step's flag where an episode ended (``final_info``), the current one elsewhere."""
        key = self.success_key
        assert key is not None  # called only for a simulator that reports success under this key
        success = self._finished_value(key, info, done)
        if success is None:
            raise TypeError(f"{type(self._sim).__name__}.step returned an info without {key!r}, which its reset "
                            f"reported; pass env.success_key=null if the simulator has no success notion")
        return success if success.dtype == torch.bool else success.to(torch.bool)

    def close(self) -> None:
        close = getattr(self._sim, "close", None)
        if close is not None:
            close()
