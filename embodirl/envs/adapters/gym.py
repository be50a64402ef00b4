"""Adapter that runs any gymnasium environment through gymnasium's vector API as a :class:`BatchedEnv`.

The sub-envs step on the host (``"sync"``: in this process, ``"async"``: one subprocess each) and the
adapter converts at the boundary: actions go to numpy (Box actions clipped to the bounds, Discrete as
integers), observations come back as tensors on ``device``: a ``Box`` observation as one float32 tensor, a
(nested) ``Dict`` of ``Box`` es as a TensorDict with one entry per leaf, each with its own dtype (uint8 images
stay uint8, floats become float32, other integers int64; :mod:`embodirl.envs.observations`). Gymnasium's
``SAME_STEP`` autoreset returns the next episode's first observation in the step that ends an episode and the
true last one in ``info["final_obs"]``, which becomes :attr:`StepResult.final_obs`. Like the other envs,
``truncated`` excludes ``terminated`` (gymnasium's ``TimeLimit`` sets both when the last allowed step terminates).
What the env returns is checked (:mod:`embodirl.envs.adapters.gym_checks`): a broken value or an exception raised
by the env is one line (:class:`~embodirl.envs.adapters.gym_checks.EnvError`) naming ``env.id`` (or ``env.make``),
the reset or step and what was wrong.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import logging
import re
import sys
import typing
import warnings
from typing import Any, Literal

import gymnasium as gym
import numpy as np
import torch
from tensordict import TensorDict
from torch import Tensor

from embodirl.config.envs import GymConfig
from embodirl.envs.adapters.gym_checks import (
    NUMERIC_KINDS,
    EnvAPIError,
    EnvError,
    checked_spec,
    describe,
    step_result_problem,
)
from embodirl.envs.base import BatchedEnv, StepResult
from embodirl.envs.observations import ObsKey, key_name, observation_spec
from embodirl.errors import ConfigError, check, is_int
from embodirl.runtime.preemption import PreemptedError

__all__ = ["GymEnv", "as_tensor", "make_vec", "quiet_worker_reports", "to_numpy", "wrapped_chain"]

log = logging.getLogger(__name__)

VectorEnv = gym.vector.SyncVectorEnv | gym.vector.AsyncVectorEnv  # what gym.make_vec makes

_SUCCESS_KEYS = ("is_success", "success")
_LIST_IDS = "python -c 'import gymnasium; gymnasium.pprint_registry()'"
_BOX2D_FIX = 'install embodirl\'s box2d extra: pip install -e ".[box2d]" (box2d 2.3.10 and pygame, from wheels)'
# Not the env's fault, or already one line: raised through as they are.
_NOT_THE_ENVS = (ConfigError, PreemptedError, MemoryError, torch.OutOfMemoryError)


def _leaf(tree: Any, key: ObsKey) -> Any:
    for part in key:
        tree = tree[part]
    return tree


def _contract_space(space: gym.Space) -> gym.Space:
    """``space`` with every Box leaf in the dtype the adapter returns it in (see :mod:`embodirl.envs.observations`)."""
    if isinstance(space, gym.spaces.Dict):
        return gym.spaces.Dict({key: _contract_space(sub) for key, sub in space.spaces.items()})
    box = typing.cast(gym.spaces.Box, space)  # observation_spec let Box and Dict leaves through only
    dtype: Any = box.dtype
    if np.issubdtype(dtype, np.floating):
        dtype = np.float32
    elif np.issubdtype(dtype, np.integer) and dtype != np.uint8:
        dtype = np.int64
    return gym.spaces.Box(box.low.astype(dtype), box.high.astype(dtype), box.shape, dtype=dtype)


def _find_spec(env_id: str) -> gym.envs.registration.EnvSpec:
    """The spec of ``env_id``, or a :class:`ConfigError` that lists the closest registered ids.

    ``"module:Env-v0"`` (gymnasium's form for an env registered by a module of your own) imports ``module`` first,
    as ``gymnasium.make`` does. A checkpoint's config never gets here with such an id unless the user trusts it
    (:mod:`embodirl.config.trust`).
    """
    module, _, name = env_id.rpartition(":") if ":" in env_id else ("", "", env_id)
    if module:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as err:
            raise ConfigError("id", env_id, f"an id whose module (before the colon) can be imported ({err})",
                              f"install {module} or put its folder on PYTHONPATH; the module must call "
                              "gymnasium.register") from None
    try:
        return gym.spec(name)
    except (gym.error.Error, ModuleNotFoundError) as err:
        if module:
            raise _unregistered(module, name, env_id) from None
        close = difflib.get_close_matches(name, list(gym.registry), n=3, cutoff=0.6)
        hint = f"did you mean {', '.join(close)}? " if close else ""
        raise ConfigError("id", env_id, f"a registered gymnasium environment id (gymnasium says: {err})",
                          fix=f"{hint}List the registered ids with: {_LIST_IDS}") from None


def _unregistered(module: str, name: str, env_id: str) -> ConfigError:
    """``module:name`` where ``module`` imports but registers no id ``name``: the ``gymnasium.register`` line to add
    (a class ``name`` in it is the entry point), or the ids it does register."""
    own = [i for i, spec in gym.registry.items() if str(spec.entry_point).startswith(f"{module}:")]
    entry = f"{module}:{name}" if inspect.isclass(getattr(sys.modules[module], name, None)) else f"{module}:<YourEnv>"
    new_id = name if re.search(r"-v\d+$", name) else f"{name}-v0"
    registers = f"it registers: {', '.join(own)}" if own else "it registers no id (gymnasium.register is never called)"
    register = (f"add gymnasium.register(\"{new_id}\", entry_point=\"{entry}\", max_episode_steps=1000) to "
                f"{module} and pass env.id={module}:{new_id}")
    fix = f"pass one of its ids, e.g. env.id={module}:{own[0]}, or {register}" if own else register
    return ConfigError("id", env_id, f"an id that {module} registers with gymnasium ({registers})", fix)


def _constructor_error(env_id: str, env_kwargs: dict[str, Any], err: Exception) -> ConfigError:
    """The :class:`ConfigError` for an env constructor that refused its arguments: the keyword it names, else all."""
    text = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    bad = re.search(r"unexpected keyword argument '(\w+)'", text)
    if bad and bad[1] in env_kwargs:
        return ConfigError(f"env_kwargs.{bad[1]}", env_kwargs[bad[1]], f"a keyword argument of {env_id}'s constructor "
                           f"(it says: {text.split(' was raised')[0]})", f"remove env_kwargs.{bad[1]}, or check "
                           f"the arguments {env_id} takes (gymnasium.spec('{env_id}').entry_point)")
    key, value = ("env_kwargs", env_kwargs) if env_kwargs else ("id", env_id)
    return ConfigError(key, value, f"arguments {env_id}'s constructor accepts (it raised {type(err).__name__}: {text})",
                       f"check env.{key} against the arguments {env_id} takes")


def make_vec(cfg: GymConfig, render_mode: str | None, autoreset_mode: str | gym.vector.AutoresetMode = "SameStep",
             ) -> tuple[VectorEnv, gym.envs.registration.EnvSpec]:
    """``cfg.num_envs`` copies of ``cfg.id`` in gymnasium's vector env (``SAME_STEP`` autoreset unless asked
    otherwise) and the id's spec, or a :class:`ConfigError` naming the id, a missing dependency or the constructor
    argument it refused."""
    spec = _find_spec(cfg.id)
    kwargs: dict[str, Any] = dict(cfg.env_kwargs)
    if cfg.max_episode_steps is not None:
        kwargs["max_episode_steps"] = cfg.max_episode_steps
    if render_mode is not None:
        kwargs["render_mode"] = render_mode
    try:
        vec: Any = gym.make_vec(checked_spec(spec), num_envs=cfg.num_envs, vectorization_mode=cfg.vectorization_mode,
                                vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode(autoreset_mode)}, **kwargs)
    except gym.error.DependencyNotInstalled as err:
        box2d = "box2d" in f"{spec.entry_point} {err}".lower()
        raise ConfigError("id", cfg.id, f"an environment whose dependencies are installed (gymnasium says: {err})",
                          fix=_BOX2D_FIX if box2d else "install the package gymnasium names") from None
    except (TypeError, ValueError, AssertionError, gym.error.Error) as err:
        raise _constructor_error(cfg.id, dict(cfg.env_kwargs), err) from None
    return vec, spec


class GymEnv(BatchedEnv):
    """``num_envs`` copies of a gymnasium environment behind the batched-env contract.

    Args:
        cfg: The env's keys (:class:`~embodirl.config.envs.GymConfig`): the gymnasium ``id`` (``"module:MyEnv-v0"``
            imports ``module``, which registers ``MyEnv-v0``, first), the number of copies, how they run, the time
            limit (None: the spec's) and ``env_kwargs`` for the environment's constructor. ``solved_threshold``
            None takes the spec's ``reward_threshold``.
        device: Device of the tensors going in and out.
        seed: Seed of the first reset.
        render_mode: ``"rgb_array"`` makes :meth:`render` work (set by the build only when videos are
            requested: some envs pay for it on every step); None: no pictures.
    """

    def __init__(self, cfg: GymConfig, *, device: str | torch.device = "cpu", seed: int = 0,
                 render_mode: Literal["rgb_array"] | None = None) -> None:
        num_envs, max_episode_steps = cfg.num_envs, cfg.max_episode_steps
        check(render_mode in (None, "rgb_array"), "render_mode", render_mode, "None or rgb_array")
        self._vec, spec = self._build(cfg, render_mode)
        self.render_mode = render_mode
        key, name = self._source(cfg)
        self._name_key, self._name = f"env.{key}", name  # what names the env in errors raised while it runs
        quiet_worker_reports(self._vec)
        try:
            self._check_spaces(key, name, self._vec.single_observation_space, self._vec.single_action_space)
            time_limit = max_episode_steps if max_episode_steps is not None else getattr(spec, "max_episode_steps",
                                                                                         None)
            if time_limit is None:
                raise ConfigError("max_episode_steps", max_episode_steps, f"an int >= 1: {name} has no time limit "
                                  "of its own", fix="pass e.g. env.max_episode_steps=1000")
        except ConfigError:
            self._vec.close()
            raise
        obs_space, act_space = self._vec.single_observation_space, self._vec.single_action_space
        self.id = cfg.id
        self.num_envs = num_envs
        self.device = torch.device(device)
        self.max_episode_steps = int(time_limit)
        self.solved_threshold = getattr(spec, "reward_threshold", None)
        if isinstance(obs_space, gym.spaces.Box):  # one float32 tensor, as before Dict spaces were accepted
            self.observation_space = gym.spaces.Box(obs_space.low.astype(np.float32),
                                                    obs_space.high.astype(np.float32), dtype=np.float32)
            self._keys, self._box_shape = None, tuple(obs_space.shape)
        else:
            self.observation_space = _contract_space(obs_space)
            self._keys = observation_spec(self.observation_space)
        # Actions are 0 .. n-1 here (what the policies output); the env's own are action_start more.
        self.action_start = int(act_space.start) if isinstance(act_space, gym.spaces.Discrete) else 0
        if isinstance(act_space, gym.spaces.Discrete):
            self.action_space = gym.spaces.Discrete(int(act_space.n))
        else:  # a Box (_check_spaces)
            box = typing.cast(gym.spaces.Box, act_space)
            self.action_space = box
            self._action_low, self._action_high, self._action_shape = box.low, box.high, box.shape
        self.info_metrics = tuple(cfg.info_metrics)
        self._unseen_info = set(self.info_metrics)  # named keys not yet in an info: refused after the first step
        self.seed = seed
        self._num_resets = self._num_steps = 0  # steps since the last reset: the "step k" of an error
        try:
            self.reset(seed=seed)
        except ConfigError:
            self._vec.close()
            raise

    def _build(self, cfg: GymConfig, render_mode: str | None) -> tuple[Any, gym.envs.registration.EnvSpec | None]:
        """The vector env and the spec its time limit and solved threshold come from (a subclass may build another)."""
        return make_vec(cfg, render_mode)

    @staticmethod
    def _source(cfg: GymConfig) -> tuple[str, str]:
        """The key that names the environment, and its value, for error messages."""
        return "id", cfg.id

    @staticmethod
    def _check_spaces(key: str, env_id: str, obs_space: gym.Space, act_space: gym.Space) -> None:
        try:
            observation_spec(obs_space)
        except ConfigError:
            raise ConfigError(key, env_id, f"an environment whose observation space is a Box or a (nested) Dict of "
                              f"Boxes; {env_id} observes {obs_space}",
                              fix="wrap it (e.g. gymnasium.wrappers.FlattenObservation in a registered env) or pick "
                                  "an env with Box or Dict observations") from None
        check(isinstance(act_space, (gym.spaces.Box, gym.spaces.Discrete)), key, env_id,
              f"an environment with a Box or Discrete action space; {env_id} acts in {act_space}",
              fix="pick an env with Box or Discrete actions")

    def reset(self, seed: int | None = None, group_size: int = 1) -> Tensor:
        """Reset every sub-env with per-env seeds (see :meth:`BatchedEnv.reset`).

        Env ``i`` is seeded from ``(seed, number of resets since seeding, i // group_size)``, so group
        members start identically (and, sharing a seed, also share later auto-reset states).

        Returns:
            First observations: ``[N, *obs_shape]`` float32 for a Box space, else a TensorDict with batch ``[N]``.
        """
        check(seed is None or is_int(seed), "seed", seed, "an int or None")
        check(is_int(group_size) and group_size >= 1 and self.num_envs % group_size == 0, "group_size", group_size,
              f"an int >= 1 that divides num_envs={self.num_envs}", fix="pick a divisor of num_envs, e.g. group_size=1")
        if seed is not None:
            self.seed, self._num_resets = seed, 0
        root = self.seed % 2**64  # SeedSequence wants non-negative entropy
        seeds = [int(np.random.SeedSequence([root, self._num_resets, i // group_size]).generate_state(1)[0])
                 for i in range(self.num_envs)]
        self._num_resets += 1
        self._num_steps = 0
        obs, info = self._reset_vec(seed=seeds)  # vector envs take one seed per env too
        self._unseen_info.difference_update(info)
        return self._to_tensor(obs)

    def step(self, action: Tensor) -> StepResult:
        """Step every sub-env once; finished ones auto-reset in the same step.

        Args:
            action: Discrete: ``[N]`` (or ``[N, 1]``) integer indices. Box: ``[N, *act_shape]`` floats,
                clipped to the space's bounds.

        Returns:
            :class:`StepResult`; ``info["success"]`` ``[N]`` bool when the env reports ``is_success``
            or ``success``.
        """
        obs, reward, terminated, truncated, info = self._step_vec(self._to_env_action(action))
        final_obs = self._final_obs(obs, info) if "final_obs" in info else obs
        terminated_t = torch.as_tensor(terminated, dtype=torch.bool).to(self.device)
        truncated_t = torch.as_tensor(truncated & ~terminated, dtype=torch.bool).to(self.device)
        reward_t = torch.as_tensor(reward, dtype=torch.float32).to(self.device)
        return StepResult(self._to_tensor(obs), reward_t, terminated_t, truncated_t, self._to_tensor(final_obs),
                          self._extras(info))

    def _reset_vec(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        """``self._vec.reset(**kwargs)``: ``(obs, info)``, or an :class:`EnvError` naming the env."""
        try:
            result = self._vec.reset(**kwargs)
        except Exception as exc:
            raise self._failure(exc, "reset") from exc
        if not (isinstance(result, tuple) and len(result) == 2 and isinstance(result[1], dict)):
            raise self._broken(f"its reset returned {describe(result)}, expected a tuple (obs, info)",
                               "return obs, info from reset (gymnasium's API since 0.26; info may be {})")
        return result

    def _step_vec(self, action: Any) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        """``self._vec.step(action)``: ``(obs, reward, terminated, truncated, info)``, each of the shape and dtype the
        contract needs (flags as bools), or an :class:`EnvError` naming the env and the step."""
        self._num_steps += 1
        try:
            result = self._vec.step(action)
        except Exception as exc:
            raise self._failure(exc, "step") from exc
        problem = step_result_problem(result)
        if problem:
            what, _, fix = problem.partition(". Fix: ")
            raise self._broken(what, fix)
        obs, reward, terminated, truncated, info = result
        if getattr(reward, "shape", None) != (self.num_envs,) or not _numeric(reward):
            raise self._broken(f"its step's rewards are {describe(reward)}, expected one number per env (an array "
                               f"of shape ({self.num_envs},))", "return one number per env as the reward")
        if not isinstance(info, dict):
            raise self._broken(f"its step's info is {describe(info)}, expected a dict",
                               "return a dict as step's last value (it may be {})")
        return obs, reward, self._flags("terminated", terminated), self._flags("truncated", truncated), info

    def _flags(self, name: str, flags: Any) -> Any:
        """``terminated`` or ``truncated`` of every env as bools: a bool array as it is, 0 and 1 as bools."""
        if getattr(flags, "shape", None) == (self.num_envs,) and flags.dtype in (_NP_BOOL, torch.bool):
            return flags
        values = to_numpy(flags)
        if values.shape != (self.num_envs,) or values.dtype.kind not in "biu" or not np.isin(values, (0, 1)).all():
            raise self._broken(f"its step's {name} flags are {describe(flags)}, expected a bool per env (an array "
                               f"of shape ({self.num_envs},); 0 and 1 are accepted)", f"return {name} as bools")
        return values.astype(bool)

    def _broken(self, what: str, fix: str) -> EnvError:
        """The one-line error for an env that broke gymnasium's API at the current reset or step."""
        return EnvError(self._name_key, self._name, f"step {self._num_steps}" if self._num_steps else "reset", what,
                        fix)

    def _failure(self, exc: Exception, call: str) -> Exception:
        """What the vector env's ``call`` (``reset`` or ``step``) raised, as one line naming the env and the step: a
        sub-env's broken value (:class:`EnvAPIError`, whose message holds its fix) or the env's own exception."""
        if isinstance(exc, _NOT_THE_ENVS):
            return exc
        if isinstance(exc, EnvAPIError):
            what, _, fix = str(exc).partition(". Fix: ")
            return self._broken(what, fix or "correct the env's " + call)
        log.debug("%s=%s raised in its %s:", self._name_key, self._name, call, exc_info=exc)
        text = " ".join(str(exc).split()) or "(no message)"
        return self._broken(f"its {call} raised {type(exc).__name__}: {text}", f"correct the env's {call} (its "
                            "traceback: rerun with hydra.verbose=embodirl.envs)")

    def _extras(self, info: dict[str, Any]) -> dict[str, Tensor]:
        """``StepResult.info``: ``success`` when the env reports it, and the ``env.info_metrics``."""
        extra: dict[str, Tensor] = {}
        success = self._success(info)
        if success is not None:
            extra["success"] = torch.as_tensor(success).to(self.device)
        if self.info_metrics:
            extra.update(self._info_metrics(info))
        return extra

    def _info_metrics(self, info: dict[str, Any]) -> dict[str, Tensor]:
        """``{key: [N] float32}`` of ``env.info_metrics``: a finished episode's value from ``final_info``, the others'
        from ``info``, 0 where an env's info lacks it. A key that neither the reset's nor the first step's info
        has is refused."""
        final_info = info.get("final_info", {})
        self._unseen_info.difference_update(info, final_info)
        if self._unseen_info:
            missing, present = sorted(self._unseen_info)[0], sorted({*info, *final_info} - {"final_info", "final_obs"})
            raise ConfigError("env.info_metrics", missing, f"a key of the info {self.id} returns (its first step's "
                              f"has: {', '.join(k for k in present if not k.startswith('_')) or 'none'})",
                              f"remove {missing} from env.info_metrics, or correct its spelling", absolute=True)
        out = {}
        for key in self.info_metrics:
            value = np.zeros(self.num_envs, dtype=np.float32)
            for source in (info, final_info):  # final_info last: it holds the step's info of done envs
                if key in source:
                    mask = to_numpy(source.get(f"_{key}", np.ones(self.num_envs, dtype=bool)))
                    value = np.where(mask, self._info_value(key, source[key]), value)
            out[key] = torch.as_tensor(value).to(self.device)
        return out

    def _info_value(self, key: str, value: Any) -> np.ndarray:
        """``info[key]`` of a key in ``env.info_metrics``: one number or bool per env, as float32."""
        if getattr(value, "shape", None) != (self.num_envs,) or not _numeric(value):
            raise self._broken(f"its info[{key!r}] (named in env.info_metrics) is {describe(value)} across the envs, "
                               f"expected one number or bool per env", f"return a number or bool as info[{key!r}], "
                               f"or remove {key} from env.info_metrics")
        return to_numpy(value).astype(np.float32)

    def close(self) -> None:
        self._vec.close()

    def render(self, env_ids: list[int] | None = None, size: int = 256) -> np.ndarray:
        """The sub-envs' own ``rgb_array`` pictures, letterboxed to squares, as uint8 ``[k, size, size, 3]``.

        Raises:
            NotImplementedError: Built without ``render_mode="rgb_array"``, or the env draws no pictures.
        """
        if self.render_mode != "rgb_array":
            raise NotImplementedError("GymEnv draws frames only when built with render_mode='rgb_array' "
                                      "(eval.video=true builds the evaluation env that way)")
        ids = list(range(self.num_envs)) if env_ids is None else list(env_ids)
        pictures = self._vec.call("render")
        if any(pictures[i] is None for i in ids):
            raise NotImplementedError(f"{self._vec.spec.id if self._vec.spec else 'this env'} returns no rgb_array "
                                      "frames")
        return np.stack([square_frame(np.asarray(pictures[i]), size) for i in ids])

    def _to_env_action(self, action: Tensor) -> Any:
        """The action as the vector env takes it (numpy here; a subclass may hand a torch env tensors)."""
        return self._to_numpy(action)

    def _to_numpy(self, action: Tensor) -> np.ndarray:
        action = action.detach().cpu()
        if self.is_discrete:
            return action.reshape(self.num_envs).to(torch.int64).numpy() + self.action_start
        array = action.reshape(self.num_envs, *self._action_shape).to(torch.float64).numpy()
        return np.clip(array, self._action_low, self._action_high).astype(self.action_space.dtype)

    def _final_obs(self, obs: Any, info: dict[str, Any]) -> Any:
        """``obs`` with the true last observation (``info["final_obs"]``, one object per env) where an episode ended."""
        ended = np.flatnonzero(info["_final_obs"])
        if self._keys is None:
            final_obs = np.array(obs, copy=True)
            for i in ended:
                final_obs[i] = info["final_obs"][i]
            return final_obs
        leaves = {key: np.array(_leaf(obs, key), copy=True) for key in self._keys}
        for i in ended:
            for key, array in leaves.items():
                array[i] = _leaf(info["final_obs"][i], key)
        return leaves

    def _to_tensor(self, obs: Any) -> Tensor | TensorDict:
        """A Box observation as one float32 tensor; a Dict one (nested numpy dicts, or ``{key: array}``) as a
        TensorDict."""
        if self._keys is None:
            return as_tensor(self._checked_obs(obs, self._box_shape, "observation"), torch.float32,
                             self.device)
        out = TensorDict({}, batch_size=[self.num_envs], device=self.device)
        for key, (shape, dtype) in self._keys.items():
            try:
                leaf = obs[key] if isinstance(obs, dict) and key in obs else _leaf(obs, key)
            except (KeyError, IndexError, TypeError):
                raise self._broken(f"its observations lack {key_name(key)} ({describe(obs)})",
                                   "return every key of the observation space on every reset and step") from None
            out.set(key, as_tensor(self._checked_obs(leaf, shape, f"observation {key_name(key)}"), dtype, self.device))
        return out

    def _checked_obs(self, array: Any, shape: tuple[int, ...], name: str) -> Any:
        """``array``, if it holds ``num_envs`` numeric observations of ``shape``; else an :class:`EnvError`."""
        if getattr(array, "shape", None) != (self.num_envs, *shape) or not _numeric(array):
            raise self._broken(f"its {name}s across the envs are {describe(array)}, expected numbers of shape "
                               f"{(self.num_envs, *shape)} (num_envs x its observation_space's shape)",
                               "return observations of the observation space's shape and a numeric dtype on every "
                               "reset and step")
        return array

    def _success(self, info: dict[str, Any]) -> np.ndarray | None:
        """``[N]`` bool success flags: a finished episode's from ``final_info``, the others' from ``info``."""
        final_info = info.get("final_info", {})
        for key in _SUCCESS_KEYS:
            if key not in info and key not in final_info:
                continue
            success = np.zeros(self.num_envs, dtype=bool)
            for source in (info, final_info):  # final_info last: it holds the step's info of done envs
                if key in source:
                    success = np.where(to_numpy(source[f"_{key}"]), to_numpy(source[key]).astype(bool), success)
            return success
        return None


_NP_BOOL = np.dtype(bool)


def wrapped_chain(vec: Any) -> list[Any]:
    """``vec`` and every vector env it wraps, outermost first."""
    chain = [vec]
    while isinstance(chain[-1], gym.vector.VectorWrapper):
        chain.append(chain[-1].env)
    return chain


def quiet_worker_reports(vec: Any) -> None:
    """Under an ``AsyncVectorEnv``, hide gymnasium's report of an error in a worker process (its traceback, as
    warnings) unless this module logs at debug level (``hydra.verbose=embodirl.envs``): the exception it raises
    again in this process becomes the one line that names the env (:class:`EnvError`)."""
    if any(isinstance(env, gym.vector.AsyncVectorEnv) for env in wrapped_chain(vec)) and not log.isEnabledFor(
            logging.DEBUG):
        warnings.filterwarnings("ignore", message=".*ERROR: ", category=UserWarning,
                                module=r"gymnasium\.vector\.async_vector_env")


def _numeric(array: Any) -> bool:
    """Whether a numpy array or a tensor holds numbers (or bools): not strings or Python objects, not complex."""
    dtype = array.dtype
    return dtype.kind in NUMERIC_KINDS if isinstance(dtype, np.dtype) else not dtype.is_complex


def to_numpy(value: Any) -> np.ndarray:
    """A numpy array of a numpy or torch value (flags, rewards and infos of a torch env)."""
    return value.detach().cpu().numpy() if isinstance(value, Tensor) else np.asarray(value)


def as_tensor(value: Any, dtype: torch.dtype, device: torch.device) -> Tensor:
    """``value`` (a numpy array, copied, or a torch tensor of an env made torch) as a ``dtype`` tensor on ``device``."""
    if isinstance(value, Tensor):
        return value.to(device=device, dtype=dtype)
    return torch.tensor(np.asarray(value), dtype=dtype, device=device)


def square_frame(picture: np.ndarray, size: int) -> np.ndarray:
    """An ``[H, W, 3]`` picture scaled to fit a black ``[size, size, 3]`` uint8 square, centred (Pillow)."""
    from PIL import Image

    h, w = picture.shape[:2]
    scale = size / max(h, w)
    new_w, new_h = max(1, round(w * scale)), max(1, round(h * scale))
    image = Image.fromarray(np.ascontiguousarray(picture[..., :3]).astype(np.uint8)).resize((new_w, new_h),
                                                                                           Image.Resampling.BILINEAR)
    out = np.zeros((size, size, 3), dtype=np.uint8)
    top, left = (size - new_h) // 2, (size - new_w) // 2
    out[top:top + new_h, left:left + new_w] = np.asarray(image)
    return out
