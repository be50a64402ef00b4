"""Misbehaving gymnasium envs through the real ``embodirl-train``: each is refused in one line on stderr that names
the env (``env.id`` or ``env.make``), when (``reset`` or ``step k``) and what was wrong, with exit status 2 and no
traceback; values gymnasium's vector envs would coerce silently (a reward of ``"1.0"``, ``terminated`` of 2 or
``"yes"``) are refused too, while bools, numpy bools, 0 and 1 are accepted."""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest
import torch

from embodirl.config.envs import GymConfig
from embodirl.envs.adapters.gym import GymEnv
from embodirl.envs.adapters.gym_checks import APICheck
from tests.conftest import representatives

HERE = "tests.envs.adapters.test_broken_envs"
SMALL = ["env.num_envs=2", "algo.num_steps=4", "algo.minibatch_size=8", "policy.hidden_sizes=[8]", "trainer=debug",
         "trainer.total_env_steps=16", "eval.every_env_steps=16", "eval.num_envs=1",
         "trainer.checkpoint_every_env_steps=16", "logger.console=none", "device=cpu"]


class _Env(gym.Env):
    """Five-step episodes of a zero observation; a subclass breaks one value, from step ``BREAK_AT`` of an
    episode on."""

    BREAK_AT = 1
    observation_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(3, np.float32), {}

    def step(self, action):
        self.t += 1
        broken = self.t >= self.BREAK_AT
        return self.obs(broken), self.reward(broken), self.terminated(broken), False, self.info(broken)

    def obs(self, broken):
        return np.zeros(3, np.float32)

    def reward(self, broken):
        return 1.0

    def terminated(self, broken):
        return self.t == 5

    def info(self, broken):
        return {"x": float(self.t)}


class ShapeChange(_Env):
    BREAK_AT = 3

    def obs(self, broken):
        return np.zeros(4 if broken else 3, np.float32)


class ObjectObs(_Env):
    def obs(self, broken):
        return np.array(["a", "b", "c"], dtype=object)


class ArrayReward(_Env):
    def reward(self, broken):
        return np.ones(2)


class StrReward(_Env):
    def reward(self, broken):
        return "1.0"


class Terminated2(_Env):
    BREAK_AT = 3

    def terminated(self, broken):
        return 2 if broken else False


class TerminatedYes(_Env):
    def terminated(self, broken):
        return "yes"


class ArrayInfo(_Env):
    def info(self, broken):
        return {"x": np.ones(2)}


class StrInfo(_Env):
    def info(self, broken):
        return {"x": "high"}


class DictInfo(_Env):
    def info(self, broken):
        return {"x": {"a": 1.0}}


class ListInfo(_Env):
    def info(self, broken):
        return [1.0]


class OldStepAPI(_Env):
    def step(self, action):
        obs, reward, terminated, _, info = super().step(action)
        return obs, reward, terminated, info


class ResetObsOnly(_Env):
    def reset(self, *, seed=None, options=None):
        return super().reset(seed=seed)[0]


class RaisesInStep(_Env):
    def step(self, action):
        if self.t == 2:
            raise RuntimeError("the simulator lost its connection")
        return super().step(action)


class RaisesInReset(_Env):
    def reset(self, *, seed=None, options=None):
        raise KeyError("level_7")


class AcceptedValues(_Env):
    """Everything gymnasium's API allows: numpy bools and 0/1 flags, numpy and bool rewards, numpy info values."""

    def reward(self, broken):
        return np.float32(0.5) if self.t % 2 else True

    def terminated(self, broken):
        return np.bool_(self.t == 5) if self.t % 2 else int(self.t == 5)

    def info(self, broken):
        return {"x": np.float64(self.t), "_private": "ignored"}


ENVS = {cls.__name__: cls for cls in (ShapeChange, ObjectObs, ArrayReward, StrReward, Terminated2, TerminatedYes,
                                      ArrayInfo, StrInfo, DictInfo, ListInfo, OldStepAPI, ResetObsOnly, RaisesInStep,
                                      RaisesInReset, AcceptedValues)}
for _name, _cls in ENVS.items():
    if f"EmbodirlBroken/{_name}-v0" not in gym.registry:  # gymnasium's env checker stays on, as for a user's env
        gym.register(f"EmbodirlBroken/{_name}-v0", entry_point=_cls, max_episode_steps=20)


def sync_vector_env(num_envs: int, name: str) -> gym.vector.SyncVectorEnv:
    """A user's ``make``: a plain SyncVectorEnv of ``name`` (no gymnasium.make, no env checker)."""
    return gym.vector.SyncVectorEnv([ENVS[name] for _ in range(num_envs)],
                                    autoreset_mode=gym.vector.AutoresetMode.NEXT_STEP)


class BrokenVectorEnv(gym.vector.VectorEnv):
    """A hand-written numpy vector env (NextStep autoreset) whose ``mode`` picks what it returns wrongly."""

    metadata = {"autoreset_mode": gym.vector.AutoresetMode.NEXT_STEP}  # noqa: RUF012 - gymnasium's way

    def __init__(self, num_envs: int, mode: str = "ok") -> None:
        self.num_envs, self.mode, self.t = num_envs, mode, 0
        self.single_observation_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
        self.single_action_space = gym.spaces.Discrete(2)
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, num_envs)
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, num_envs)
        self.spec = gym.envs.registration.EnvSpec("BrokenVector-v0", max_episode_steps=20)

    def reset(self, *, seed=None, options=None):
        self.t = 0
        obs = np.zeros((self.num_envs, 3), np.float32)
        return obs if self.mode == "reset_obs_only" else (obs, {})

    def step(self, action):
        self.t += 1
        n, mode = self.num_envs, self.mode
        if mode == "raises" and self.t == 2:
            raise ValueError("joint 3 out of range")
        obs = np.zeros((n, 4 if mode == "shape" and self.t >= 3 else 3), np.float32)
        reward = np.ones((n, 2)) if mode == "array_reward" else np.ones(n, np.float32)
        terminated = np.array(["yes"] * n) if mode == "terminated_yes" else np.zeros(n, bool)
        if mode == "old_api":
            return obs, reward, terminated, {}
        return obs, reward, terminated, np.zeros(n, bool), {}


def _vector(mode: str) -> list[str]:
    return ["env=gym_vector", f"env.make={{_target_: {HERE}.BrokenVectorEnv, mode: {mode}}}"]


def _sync(name: str) -> list[str]:
    return ["env=gym_vector", f"env.make={{_target_: {HERE}.sync_vector_env, name: {name}}}",
            "env.max_episode_steps=20"]


def _gym(name: str, *more: str) -> list[str]:
    return ["env=gym", f"env.id=EmbodirlBroken/{name}-v0", *more]


INFO = "env.info_metrics=[x]"
CASES = {  # overrides -> fragments of the one line on stderr
    "shape-changes": (_gym("ShapeChange"), ["env.id='EmbodirlBroken/ShapeChange-v0' failed at step 3",
                                           "observation has shape (4,), expected (3,)", "Fix: "]),
    "object-obs": (_gym("ObjectObs"), ["at step 1", "observation is an array of shape (3,) and dtype object",
                                       "Fix: return numbers"]),
    "array-reward": (_gym("ArrayReward"), ["at step 1", "reward is an array of shape (2,) and dtype float64",
                                           "expected one number per env", "Fix: return the reward as one number"]),
    "str-reward": (_gym("StrReward"), ["at step 1", "reward is '1.0' (a str)", "float(reward)"]),
    "terminated-2": (_gym("Terminated2"), ["at step 3", "terminated is 2 (an int), expected a bool",
                                           "Fix: return the flag as a bool"]),
    "terminated-yes": (_gym("TerminatedYes"), ["at step 1", "terminated is 'yes' (a str), expected a bool"]),
    "old-step-api": (_gym("OldStepAPI"), ["at step 1", "returned 4 values (obs, reward, done, info",
                                          "expected 5 (obs, reward, terminated, truncated, info)"]),
    "reset-obs-only": (_gym("ResetObsOnly"), ["at reset", "its reset returned an array of shape (3,)",
                                              "expected a tuple (obs, info)", "Fix: return obs, info from reset"]),
    "array-info": (_gym("ArrayInfo", INFO), ["at step 1", "info['x'] (named in env.info_metrics) is an array of "
                                             "shape (2, 2)", "expected one number or bool per env"]),
    "str-info": (_gym("StrInfo", INFO), ["info['x'] (named in env.info_metrics) is an array of shape (2,) and "
                                         "dtype object"]),
    "dict-info": (_gym("DictInfo", INFO), ["info['x'] (named in env.info_metrics) is {", "(a dict)"]),
    "list-info": (_gym("ListInfo"), ["at step 1", "info is [1.0] (a list), expected a dict"]),
    "raises-in-step": (_gym("RaisesInStep"), ["at step 3", "its step raised RuntimeError: the simulator lost its "
                                              "connection", "hydra.verbose=embodirl.envs"]),
    "raises-in-reset": (_gym("RaisesInReset"), ["at reset", "its reset raised KeyError: 'level_7'"]),
    "async-str-reward": (_gym("StrReward", "env.vectorization_mode=async"), ["at step 1", "reward is '1.0'"]),
    "next-step-raises": (["env=gym_vector", "env.id=EmbodirlBroken/RaisesInStep-v0", "env.autoreset_mode=NextStep"],
                         ["env.id='EmbodirlBroken/RaisesInStep-v0' failed at step 3", "RuntimeError"]),
    "make-sync-str-reward": (_sync("StrReward"), [f"env.make='{HERE}.sync_vector_env' failed at step 1",
                                                  "reward is '1.0' (a str)"]),
    "make-sync-terminated-2": (_sync("Terminated2"), ["at step 3", "terminated is 2 (an int)"]),
    "make-shape-changes": (_vector("shape"), [f"env.make='{HERE}.BrokenVectorEnv' failed at step 3",
                                              "observations across the envs are an array of shape (2, 4)",
                                              "expected numbers of shape (2, 3)"]),
    "make-array-reward": (_vector("array_reward"), ["at step 1", "rewards are an array of shape (2, 2)"]),
    "make-terminated-yes": (_vector("terminated_yes"), ["at step 1", "terminated flags are an array of shape (2,) "
                                                        "and dtype <U3", "expected a bool per env"]),
    "make-old-step-api": (_vector("old_api"), ["at step 1", "returned 4 values (obs, reward, done, info"]),
    "make-reset-obs-only": (_vector("reset_obs_only"), ["at reset", "expected a tuple (obs, info)"]),
    "make-raises": (_vector("raises"), ["at step 2", "its step raised ValueError: joint 3 out of range"]),
}


# One representative per adapter path (gym, async gym, NextStep, a sync make, an own vector env) and reset.
@pytest.mark.parametrize(("overrides", "fragments"), representatives(
    ["shape-changes", "raises-in-reset", "async-str-reward", "next-step-raises", "make-sync-str-reward",
     "make-shape-changes"], CASES))
def test_a_broken_env_is_one_line_naming_it_the_step_and_what_was_wrong(cli, tmp_path, overrides, fragments):
    outcome = cli("embodirl-train", [*SMALL, *overrides, f"hydra.run.dir={tmp_path}"])
    lines = [line for line in outcome.err.splitlines() if line.strip()]
    assert outcome.code == 2, outcome.err
    assert len(lines) == 1 and "Traceback" not in outcome.err + outcome.out, outcome.err
    missing = [fragment for fragment in fragments if fragment not in lines[0]]
    assert not missing and "please report" not in lines[0], (missing, lines[0])


@pytest.mark.parametrize("env", [["env=gym"], ["env=gym_vector", "env.autoreset_mode=NextStep"]],
                         ids=["gym", "gym_vector-NextStep"])
def test_accepted_values_train_and_the_named_info_is_logged(cli, tmp_path, env):
    # NextStep with env.info_metrics was a KeyError: that branch never added the info metrics
    outcome = cli("embodirl-train", [*SMALL, *env, "env.id=EmbodirlBroken/AcceptedValues-v0", INFO,
                                     "trainer.total_env_steps=32", f"hydra.run.dir={tmp_path}"])
    assert outcome.code == 0, outcome.err
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    values = [row["episode/metrics/x"] for row in rows if "episode/metrics/x" in row]
    assert values and all(value == 5.0 for value in values)  # x on an episode's last step (its 5th)


def test_the_check_steps_aside_after_the_first_episode():
    # what keeps the check off the hot path: after its first episode and the reset after it, a sub-env's own
    # reset and step are called directly
    env = GymEnv(GymConfig(id="EmbodirlBroken/AcceptedValues-v0", num_envs=2))
    checks = [sub.env.env.env for sub in env._vec.envs]  # TimeLimit > OrderEnforcing > PassiveEnvChecker > APICheck
    assert all(isinstance(check, APICheck) and "step" not in vars(check) for check in checks)
    for _ in range(5):
        env.step(torch.zeros(2, dtype=torch.int64))
    assert all(vars(check)["step"] == check.env.step and vars(check)["reset"] == check.env.reset for check in checks)
    env.close()
