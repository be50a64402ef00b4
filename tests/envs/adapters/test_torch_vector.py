"""TorchVectorEnv against a fake that follows ManiSkill3's vector-env API: observation, final-observation, flag and
success mapping, group-shared resets, no host syncs in step, config errors, and training through the platform."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from tensordict import TensorDict
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from embodirl.app.build import build_env
from embodirl.config.envs import TorchVectorConfig
from embodirl.config.schema import parse
from embodirl.envs.adapters.torch_vector import TorchVectorEnv
from embodirl.envs.observations import check_observation, observation_spec
from embodirl.errors import ConfigError
from tests.envs.adapters.fake_maniskill import FakeManiSkillVectorEnv

FAKE = "tests.envs.adapters.fake_maniskill.FakeManiSkillVectorEnv"
CPU = torch.device("cpu")


def make_env(num_envs: int = 4, seed: int = 0, adapter: dict | None = None, **sim) -> TorchVectorEnv:
    keys = dict(adapter or {})
    device = keys.pop("device", "cpu")
    return TorchVectorEnv(TorchVectorConfig(make={"_target_": FAKE, **sim}, num_envs=num_envs, **keys), device=device,
                          seed=seed)


def spy(env: TorchVectorEnv, method: str) -> list:
    """Record what the simulator's ``method`` received and returned."""
    calls, original = [], getattr(env._sim, method)

    def wrapped(*args, **kwargs):
        result = original(*args, **kwargs)
        calls.append((args, kwargs, result))
        return result

    setattr(env._sim, method, wrapped)
    return calls


def leaf(tree, key):
    for part in key:
        tree = tree[part]
    return tree


@pytest.mark.parametrize("obs_mode", ["state", "state_dict", "rgb"])
def test_observations_map_leaf_by_leaf_keeping_dtypes(obs_mode):
    env = make_env(obs_mode=obs_mode, camera_size=8)
    sim = env._sim
    assert env.observation_space is sim.single_observation_space and env.action_space is sim.single_action_space
    assert env.max_episode_steps == 50 and env.solved_metric == "eval/success_rate" and env.solved_threshold == 0.9
    spec = observation_spec(env.observation_space)
    steps = spy(env, "step")
    obs = env.reset(seed=1)
    check_observation("reset", obs, spec, 4, CPU)
    step = env.step(torch.full((4, 2), 0.5))
    for value in (step.obs, step.final_obs):
        check_observation("step", value, spec, 4, CPU)
    raw = steps[-1][2][0]
    if obs_mode == "state":
        assert isinstance(step.obs, torch.Tensor) and step.obs is raw and step.obs.shape == (4, 8)
        return
    assert isinstance(step.obs, TensorDict) and set(spec) >= {("agent", "qpos"), ("extra", "goal_pos")}
    for key in spec:
        assert step.obs.get(key) is leaf(raw, key), "leaves are the simulator's tensors, not copies"
    if obs_mode == "rgb":
        image = step.obs.get(("sensor_data", "base_camera", "rgb"))
        assert image.dtype == torch.uint8 and image.shape == (4, 8, 8, 3)
        assert spec[("sensor_data", "base_camera", "rgb")] == ((8, 8, 3), torch.uint8)


def test_truncation_gives_the_final_observation_and_excludes_termination():
    env = make_env(num_envs=3, max_episode_steps=4, obs_mode="state_dict")
    sim, steps = env._sim, spy(env, "step")
    env.reset(seed=2)
    for t in range(1, 5):
        if t == 4:  # env 0 reaches its goal on the last allowed step: the simulator sets both flags
            sim.qpos[0] = sim.goal[0]
        step = env.step(torch.zeros(3, 2))
        info = steps[-1][2][4]
        if t < 4:
            assert not (step.terminated | step.truncated).any() and "final_observation" not in info
            assert all(torch.equal(step.final_obs.get(k), step.obs.get(k)) for k in step.obs.keys(True, True))
    assert steps[-1][2][2].tolist() == [True, False, False] and steps[-1][2][3].all()
    assert step.terminated.tolist() == [True, False, False] and step.truncated.tolist() == [False, True, True]
    final = info["final_observation"]
    for key in observation_spec(env.observation_space):
        assert torch.equal(step.final_obs.get(key), leaf(final, key)), "the pre-reset observation"
        assert torch.equal(step.obs.get(key), leaf(steps[-1][2][0], key)), "the next episode's first"
    assert not torch.equal(step.final_obs.get(("agent", "qpos")), step.obs.get(("agent", "qpos")))
    assert step.reward.dtype == torch.float32 and step.reward[0] == 1.0


def test_success_comes_from_the_finished_step_where_an_episode_ended():
    env = make_env(num_envs=3, max_episode_steps=3, ignore_terminations=True)
    sim = env._sim
    env.reset(seed=3)
    env.step(torch.zeros(3, 2))
    sim.qpos[2] = sim.goal[2]  # env 2 sits on its goal; the others do not
    step = env.step(torch.zeros(3, 2))
    assert step.info["success"].tolist() == [False, False, True] and not step.terminated.any()
    sim.qpos[1] = sim.goal[1]
    step = env.step(torch.zeros(3, 2))  # the time limit: every env resets inside the step
    assert step.truncated.all() and step.info["success"].tolist() == [False, True, True]
    assert not sim.get_info()["success"][1:].any(), "the reset states are not successes"
    # env.solved_threshold is a setup key: the build applies it over the adapter's own criterion
    quiet = build_env({"_target_": "embodirl.envs.adapters.torch_vector.TorchVectorEnv", "make": {"_target_": FAKE},
                       "num_envs": 2, "success_key": None, "solved_threshold": 5.0}, CPU, seed=0)
    assert "success" not in quiet.step(torch.zeros(2, 2)).info
    assert quiet.solved_metric == "eval/return_mean" and quiet.solved_threshold == 5.0


def test_box_actions_are_clipped_to_the_bounds():
    env = make_env(num_envs=2)
    steps = spy(env, "step")
    env.step(torch.tensor([[3.0, -0.5], [-2.0, 0.25]]))
    assert steps[0][0][0].tolist() == [[1.0, -0.5], [-1.0, 0.25]]


def test_group_shared_resets_need_per_env_seeds():
    with pytest.raises(ConfigError, match=r"^algo.group_shared_reset=True is invalid.*env.per_env_seeds=true"):
        make_env(num_envs=4).reset(group_size=2)
    pushcube_like = make_env(num_envs=4, adapter={"per_env_seeds": True})  # torch.rand under one seed
    with pytest.raises(ConfigError, match=r"^env.per_env_seeds=True is invalid.*'agent.qpos'|'state'"):
        pushcube_like.reset(seed=0, group_size=2)
    env = make_env(num_envs=6, adapter={"per_env_seeds": True}, rng="batched", obs_mode="state_dict")
    resets = spy(env, "reset")
    grouped = env.reset(seed=3, group_size=3)
    seeds = resets[-1][1]["seed"]
    assert len(seeds) == 6 and seeds[:3] == [seeds[0]] * 3 and seeds[3:] == [seeds[3]] * 3 and seeds[0] != seeds[3]
    goal = grouped.get(("extra", "goal_pos"))
    assert torch.equal(goal[:3], goal[:1].expand(3, 2)) and not torch.equal(goal[0], goal[3])
    fresh = env.reset(group_size=3)
    assert not torch.equal(fresh.get(("extra", "goal_pos")), goal), "seed=None draws new seeds"
    assert torch.equal(env.reset(seed=3, group_size=3).get(("extra", "goal_pos")), goal)
    with pytest.raises(ConfigError, match=r"^group_size="):
        env.reset(group_size=4)


def test_seeds_reach_the_simulator_as_31_bit_ints_and_reproduce_resets():
    env = make_env(num_envs=2)
    resets = spy(env, "reset")
    first = env.reset(seed=7_919_000_017)  # an evaluation seed: too large for numpy's RandomState
    assert 0 <= resets[-1][1]["seed"] < 2**31
    env.step(torch.ones(2, 2))
    assert torch.equal(env.reset(seed=7_919_000_017), first)
    env.reset()
    assert resets[-1][1]["seed"] is None, "seed=None lets the simulator continue its own stream"


class _SyncRecorder(TorchFunctionMode):
    """Records tensor methods that copy to the host or synchronise with it (``paused`` while the simulator runs)."""

    HOST = frozenset({"cpu", "numpy", "item", "tolist", "__bool__", "__int__", "__float__", "__index__", "nonzero"})

    def __init__(self) -> None:
        super().__init__()
        self.paused, self.calls = False, []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", str(func))
        if not self.paused and name in self.HOST:
            self.calls.append(name)
        return func(*args, **(kwargs or {}))


class _ScalarRecorder(TorchDispatchMode):
    """Records ATen ops whose result the host must wait for (``paused`` while the simulator runs)."""

    SYNC = ("aten._local_scalar_dense", "aten.nonzero", "aten.masked_select", "aten.unique", "aten._to_copy")

    def __init__(self) -> None:
        super().__init__()
        self.paused, self.calls = False, []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not self.paused and str(func).startswith(self.SYNC):
            self.calls.append(str(func))
        return func(*args, **(kwargs or {}))


def _record_adapter_steps(env: TorchVectorEnv, num_steps: int, pause_simulator: bool) -> list[str]:
    functions, ops = _SyncRecorder(), _ScalarRecorder()
    original = env._sim.step

    def simulator_step(action):
        functions.paused = ops.paused = pause_simulator
        try:
            return original(action)
        finally:
            functions.paused = ops.paused = False

    env._sim.step = simulator_step
    action = torch.zeros(env.num_envs, 2)
    with functions, ops:
        for _ in range(num_steps):
            env.step(action)
    env._sim.step = original
    return functions.calls + ops.calls


@pytest.mark.parametrize(("obs_mode", "final_obs"), [("state", "info"), ("rgb", "info"), ("state_dict", "acted_on")])
def test_step_never_syncs_with_the_host(obs_mode, final_obs):
    env = make_env(num_envs=4, max_episode_steps=3, obs_mode=obs_mode, camera_size=8, adapter={"final_obs": final_obs})
    assert _record_adapter_steps(env, 7, pause_simulator=True) == [], "the adapter's own work stays on the device"
    # The recorders do see syncs: ManiSkill's own wrapper branches on dones.any() (the same code in the fake).
    assert "__bool__" in _record_adapter_steps(env, 3, pause_simulator=False)


@pytest.mark.gpu
def test_step_never_syncs_on_cuda():
    env = make_env(num_envs=4, max_episode_steps=3, obs_mode="rgb", camera_size=8, sim_backend="physx_cuda",
                   adapter={"device": "cuda"})
    original = env._sim.step

    def simulator_step(action):  # ManiSkill's own wrapper syncs (dones.any()); only the adapter is checked
        torch.cuda.set_sync_debug_mode("default")
        try:
            return original(action)
        finally:
            torch.cuda.set_sync_debug_mode("error")

    env._sim.step = simulator_step
    action = torch.zeros(4, 2, device="cuda")
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(7):
            env.step(action)
    finally:
        torch.cuda.set_sync_debug_mode("default")


class _IsaacLabStyle(FakeManiSkillVectorEnv):
    """Isaac Lab's conventions on the fake's task: observation groups, no final observation, no success, no spec."""

    def __init__(self, num_envs: int) -> None:
        super().__init__(num_envs=num_envs, obs_mode="state", max_episode_steps=3, ignore_terminations=True)
        self.spec, self.max_episode_length = None, 3  # the fake built its space from reset(): already the groups

    def _groups(self, obs):
        return {"policy": obs, "critic": self.goal - self.qpos}

    def reset(self, *, seed=None, options=None):
        obs, _ = super().reset(seed=seed, options=options)
        return self._groups(obs), {}

    def step(self, actions):
        obs, reward, terminated, truncated, _ = super().step(actions)
        return self._groups(obs if isinstance(obs, torch.Tensor) else obs["policy"]), reward, terminated, truncated, {}


def test_isaac_lab_style_final_observation_is_the_one_acted_on():
    isaac = {"_target_": "tests.envs.adapters.test_torch_vector._IsaacLabStyle"}
    env = TorchVectorEnv(TorchVectorConfig(make=isaac, num_envs=2, final_obs="acted_on"))
    assert env.max_episode_steps == 3 and env.solved_metric == "eval/return_mean" and env.solved_threshold is None
    observed = [env.reset(seed=0)]
    for _ in range(3):
        step = env.step(torch.full((2, 2), 0.3))
        observed.append(step.obs)
    assert step.truncated.all() and "success" not in step.info
    assert torch.equal(step.final_obs.get("policy"), observed[2].get("policy")), "the observation acted on"
    assert not torch.equal(step.final_obs.get("policy"), step.obs.get("policy"))
    plain = TorchVectorEnv(TorchVectorConfig(make=isaac, num_envs=2))
    for _ in range(3):
        step = plain.step(torch.zeros(2, 2))
    assert torch.equal(step.final_obs.get("policy"), step.obs.get("policy")), "final_obs=info: nothing to read"


@pytest.mark.parametrize(("make", "kwargs", "key"), [
    (None, {}, "make"),
    ("no_such_module.make_sim", {}, "make"),
    ({"_target_": "no_such_module.Sim"}, {}, "make._target_"),
    ({"_target_": FAKE, "obs_mod": "rgb"}, {}, "make.obs_mod"),
    ({"_target_": FAKE, "num_envs": 8}, {}, "make.num_envs"),
    ({"_target_": "os.getcwd"}, {}, "make"),
    ({"_target_": FAKE, "auto_reset": False}, {}, "make.auto_reset"),
    ({"_target_": FAKE}, {"device": "cuda:0"}, "device"),
    ({"_target_": FAKE}, {"num_envs": 0}, "num_envs"),
    ({"_target_": FAKE}, {"final_obs": "last"}, "final_obs"),
    ({"_target_": "tests.envs.adapters.test_torch_vector._IsaacLabStyle"}, {"max_episode_steps": 0},
     "max_episode_steps"),
])
def test_bad_config(make, kwargs, key):
    keys = dict(kwargs)
    device = keys.pop("device", "cpu")
    with pytest.raises(ConfigError, match=f"^{key}=") as info:
        TorchVectorEnv(parse(TorchVectorConfig, {"make": make, **keys}), device=device)
    assert "Fix:" in str(info.value)


class _NoLimit(FakeManiSkillVectorEnv):
    """A simulator that states no episode limit (no spec, no max_episode_length)."""

    def __init__(self, num_envs):
        super().__init__(num_envs=num_envs)
        self.spec = None


def test_an_unstated_episode_limit_is_asked_for():
    make = "tests.envs.adapters.test_torch_vector._NoLimit"
    with pytest.raises(ConfigError, match=r"^max_episode_steps=None.*pass env.max_episode_steps"):
        TorchVectorEnv(TorchVectorConfig(make=make, num_envs=2))
    assert TorchVectorEnv(TorchVectorConfig(make=make, num_envs=2, max_episode_steps=9)).max_episode_steps == 9


# --- through the platform -----------------------------------------------------------------------------------
USER_CONFIG = f"""\
defaults:
  - torch_vector
  - _self_
make:
  _target_: {FAKE}
  obs_mode: state_dict
  ignore_terminations: true
  max_episode_steps: 20
  rng: batched
num_envs: 16
"""


def _train_cli(cli, tmp_path: Path, *args: str):
    """``embodirl-train`` (in this process) with the user's own config file for the simulator (``--config-dir``)."""
    (tmp_path / "conf" / "env").mkdir(parents=True, exist_ok=True)
    (tmp_path / "conf" / "env" / "fake_maniskill.yaml").write_text(USER_CONFIG)
    return cli("embodirl-train", ["--config-dir", str(tmp_path / "conf"), "env=fake_maniskill", "device=cpu",
                                  "logger.console=none", f"hydra.run.dir={tmp_path / 'run'}", *args])


def test_one_config_file_plugs_a_simulator_into_embodirl_train(tmp_path, cli, monkeypatch):
    import json

    monkeypatch.chdir(tmp_path)
    done = _train_cli(cli, tmp_path, "algo.num_steps=8", "trainer.total_env_steps=384", "eval.every_env_steps=128")
    assert done.code == 0, done.err[-2000:]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["iterations"] == 3
    assert summary["solved_metric"] == "eval/success_rate" and 0.0 <= summary["eval/success_rate"] <= 1.0


def test_grpo_group_resets_are_refused_in_one_line_without_per_env_seeds(tmp_path, cli, monkeypatch):
    monkeypatch.chdir(tmp_path)
    refused = _train_cli(cli, tmp_path, "algo=grpo", "trainer.total_env_steps=640")
    assert refused.code == 2
    last = refused.err.strip().splitlines()[-1]
    assert last.startswith("embodirl-train: error: algo.group_shared_reset=True is invalid") and "Fix:" in last


@pytest.mark.slow
@pytest.mark.parametrize(("algo", "overrides"), [
    ("ppo", ["algo.num_steps=20", "algo.minibatch_size=640", "algo.gamma=0.9"]),
    ("grpo", ["env.per_env_seeds=true"]),
])
def test_ppo_and_grpo_learn_the_fake_task_through_the_adapter(tmp_path, algo, overrides):
    from embodirl.app.run import run_training
    from tests.conftest import compose_config

    make = f"{{_target_:{FAKE},obs_mode:state_dict,ignore_terminations:true,max_episode_steps:20,rng:batched}}"
    cfg = compose_config([f"algo={algo}", "env=torch_vector", f"env.make={make}", "env.num_envs=64", "device=cpu",
                          "trainer.total_env_steps=300000", "eval.every_env_steps=12800", "logger.console=none",
                          *overrides])
    summary = run_training(cfg, tmp_path)
    assert summary["stop_reason"] == "solved" and summary["eval/success_rate"] >= 0.9


def test_named_info_keys_become_info_metrics_and_an_unknown_one_is_refused():
    env = make_env(num_envs=2, adapter={"info_metrics": ["elapsed_steps"]}, max_episode_steps=3)
    steps = [env.step(torch.zeros(2, 2)) for _ in range(3)]
    assert steps[-1].truncated.all() and steps[-1].info["elapsed_steps"].tolist() == [3.0, 3.0]  # the finished step's
    assert steps[0].info["elapsed_steps"].dtype == torch.float32
    bad = make_env(num_envs=2, adapter={"info_metrics": ["elapsed"]})
    with pytest.raises(ConfigError, match=r"^env.info_metrics='elapsed' is invalid.*elapsed_steps.*Fix: remove"):
        bad.step(torch.zeros(2, 2))

@pytest.mark.parametrize(("autoreset_mode", "reason"), [
    ("NextStep", "states autoreset_mode NextStep, whose reset step would be stored as a transition"),
    ("SameStep", "NumpyToTorch fails on SameStep's info['final_obs']"),
])
def test_gymnasium_vector_env_made_torch_is_refused_pointing_to_gym_vector(autoreset_mode, reason):
    # NextStep was accepted and trained on one phantom zero-reward transition per episode (CartPole's episode
    # length was its return + 1); SameStep crashed inside gymnasium at the first finished episode
    make = {"_target_": "tests.envs.adapters.torch_gymnasium.make_torch_cartpole", "autoreset_mode": autoreset_mode}
    with pytest.raises(ConfigError, match="make='NumpyToTorch' is invalid") as err:
        TorchVectorEnv(TorchVectorConfig(make=make, num_envs=4, success_key=None))
    assert reason in str(err.value) and "select env=gym_vector" in str(err.value)
