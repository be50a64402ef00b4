"""``torch.compile`` of the native envs' ``step``: one graph, no recompiles, compiled equals eager.

Graph breaks and recompiles are decided by dynamo, whatever the backend, so they are checked with
``backend="eager"`` (it runs the traced graph with the same kernels as eager, so its results must equal
eager's bit for bit). Numerical agreement of generated code is checked with inductor, once per env, because
a cold inductor compile is by far the slowest step of these tests. The
module is in the slow tier.
"""

from __future__ import annotations

import pytest
import torch

from embodirl.config.envs import CartPoleConfig, PushCubeConfig
from embodirl.config.randomize import RandomizeConfig
from embodirl.envs.base import BatchedEnv, StepResult
from embodirl.envs.cartpole import CartPole
from embodirl.envs.fast_paths import add_fast_paths
from embodirl.envs.push_cube.env import PushCube

pytestmark = pytest.mark.slow  # dynamo traces every env step (seconds each); inductor compiles

NUM_ENVS = 16
CONFIGS = {  # short episodes, so that auto-resets happen every few steps
    "cartpole": (CartPole, {"max_episode_steps": 20}),
    "push_cube": (PushCube, {"max_episode_steps": 8}),
    "push_cube_joint_aligned": (PushCube, {"control_mode": "joint_delta_pos", "goal_direction": "random_aligned",
                                           "randomize_yaw": True, "time_obs": True, "reward_mode": "dense",
                                           "max_episode_steps": 8}),
    "push_cube_random_terminate": (PushCube, {"goal_direction": "random", "randomize_yaw": True,
                                              "terminate_on_success": True, "fail_on_leaving_workspace": True,
                                              "reward_mode": "sparse", "goal_offset": 0.09,
                                              "table_half_size": (0.12, 0.12), "max_episode_steps": 8}),
    "push_cube_state_rgb": (PushCube, {"obs_mode": "state_rgb", "goal_direction": "random", "randomize_yaw": True,
                                       "max_episode_steps": 8}),
    "push_cube_joint_rgb": (PushCube, {"obs_mode": "rgb", "control_mode": "joint_delta_pos", "image_size": 32,
                                       "max_episode_steps": 8}),
    "cartpole_randomized": (CartPole, {"max_episode_steps": 20, "randomize": {
        name: RandomizeConfig(range=(0.5, 2.0), dist="log_uniform") for name in CartPoleConfig.randomizable}}),
    "push_cube_randomized": (PushCube, {"max_episode_steps": 8, "randomize": {
        "cube_mass": RandomizeConfig(range=(0.5, 2.0), dist="log_uniform"),
        "table_friction": RandomizeConfig(range=(0.0, 2.0)), "push_friction": RandomizeConfig(range=(0.5, 2.0)),
        "cube_half_size": RandomizeConfig(range=(0.75, 1.5)), "pusher_radius": RandomizeConfig(range=(1.0, 1.5)),
        "goal_offset": RandomizeConfig(range=(0.1, 0.3), scale="absolute"),
        "actuator_gain": RandomizeConfig(range=(0.5, 1.5))}}),
    "push_cube_visual": (PushCube, {"obs_mode": "state_rgb", "image_size": 32, "max_episode_steps": 8, "randomize": {
        "cube_color": RandomizeConfig(range=(0.0, 255.0), scale="absolute"),
        "goal_color": RandomizeConfig(range=(0.5, 1.5)), "light": RandomizeConfig(range=(0.6, 1.4)),
        "camera_shift": RandomizeConfig(range=(0.0, 0.05), scale="absolute"),
        "camera_roll": RandomizeConfig(range=(0.0, 15.0), scale="absolute"),
        "camera_fov": RandomizeConfig(range=(0.8, 1.2))}}),
}


@pytest.fixture(autouse=True)
def fresh_dynamo():
    """Compiled code and counters of one test never leak into another."""
    import torch._dynamo  # here, not at the top: collecting the fast tier must not import dynamo (the slowest import)
    import torch._inductor.config
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def tolerance(name: str) -> float:
    """Float tolerance of compiled vs eager (see test_compiled_step_never_recompiles_and_equals_eager)."""
    return 1e-6 if name == "cartpole" else 1e-4


SCHEMAS = {CartPole: CartPoleConfig, PushCube: PushCubeConfig}


def make(name: str, device: str = "cpu", **overrides) -> BatchedEnv:
    cls, kwargs = CONFIGS[name]
    return cls(SCHEMAS[cls](num_envs=NUM_ENVS, **{**kwargs, **overrides}), device=device, seed=3)


def random_actions(env: BatchedEnv, num_steps: int, seed: int = 0) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    if env.is_discrete:
        return list(torch.randint(0, 2, (num_steps, env.num_envs), generator=gen))
    actions = torch.rand(num_steps, env.num_envs, 2, generator=gen) * 2 - 1
    actions[:, ::2] = torch.tensor([1.0, 0.0])  # half the envs push straight ahead: contacts
    return list(actions)


def flatten(step: StepResult) -> dict[str, torch.Tensor]:
    def leaves(name: str, obs) -> dict[str, torch.Tensor]:
        return {name: obs} if isinstance(obs, torch.Tensor) else {f"{name}.{k}": v for k, v in obs.items()}

    return {**leaves("obs", step.obs), "reward": step.reward, "terminated": step.terminated,
            "truncated": step.truncated, **leaves("final_obs", step.final_obs),
            **{f"info.{k}": v for k, v in step.info.items()}}


def assert_steps_agree(got: StepResult, want: StepResult, tol: float) -> None:
    """Equal flags and integers; floats within ``tol`` (0: bit for bit). Images (uint8) equal, except, when
    ``tol > 0``, at most 1 pixel in 1000: a pixel centre within ``tol`` of a shape's edge may fall either side."""
    got, want = flatten(got), flatten(want)
    assert got.keys() == want.keys()
    for key, value in want.items():
        if value.dtype == torch.uint8 and tol > 0:
            differ = (got[key] != value).any(-1)
            assert differ.sum() <= differ.numel() / 1000, (key, int(differ.sum()))
        elif value.is_floating_point() and tol > 0:
            torch.testing.assert_close(got[key], value, rtol=tol, atol=tol, msg=lambda m, key=key: f"{key}: {m}")
        else:
            assert torch.equal(got[key], value), key


@pytest.mark.parametrize("name", CONFIGS)
def test_step_traces_into_one_graph_without_breaks(name):
    env = make(name)
    explanation = torch._dynamo.explain(env.step)(random_actions(env, 1)[0])
    assert explanation.graph_break_count == 0, [str(r.reason) for r in explanation.break_reasons]
    assert explanation.graph_count == 1


@pytest.mark.parametrize("name", CONFIGS)
def test_compiled_step_never_recompiles_and_equals_eager(name):
    """Auto-resets, explicit resets, restored snapshots and eager steps in between: one compilation, and the
    same results as an eager env. Not bit for bit: CartPole's eager CPU path takes cos/sin from the C library
    (gymnasium parity), compiled code from torch (1 ulp apart); dynamo runs ``addcmul_(..., value=-1)`` as a
    fused multiply-add (1 ulp), which the contact amplifies to a few 1e-5 within an 8-step episode (measured:
    float32 perturbed by 2 ulp every step drifts 3e-5 in 9 steps); every episode restarts from identical
    start states, so 1e-4 bounds the float32 differences, and flags agree exactly."""
    compiled_env, eager_env = make(name), make(name)
    step = torch.compile(compiled_env.step, fullgraph=True, backend="eager")
    tol = tolerance(name)
    limit = compiled_env.max_episode_steps
    actions = iter(random_actions(eager_env, 10 * limit + 8))

    def run(num_steps: int, compiled: bool = True) -> None:
        for _ in range(num_steps):
            action = next(actions)
            assert_steps_agree((step if compiled else compiled_env.step)(action), eager_env.step(action), tol)

    with torch._dynamo.config.patch(error_on_recompile=True):
        run(limit + 1, compiled=False)  # eager steps on the compiled env fill its eager reset memo
        run(2 * limit + 3)  # compiled steps (auto-resets) advance the episode counters past the memo
        run(limit + 1, compiled=False)  # eager again, an auto-reset among them: the memo must be refilled first
        for env in (compiled_env, eager_env):
            env.reset(seed=5)
        run(limit)
        for env in (compiled_env, eager_env):
            env.reset(group_size=4)
        run(2 * limit)
        compiled_env.load_state_dict(eager_env.state_dict())
        run(2 * limit)


@pytest.mark.parametrize("name", ["cartpole_randomized", "push_cube_randomized", "push_cube_visual"])
def test_a_moved_randomization_range_needs_no_recompile_and_equals_eager(name):
    """A curriculum moves a range between compiled steps: the ranges are tensors updated in place, so the
    compiled step reads the new ones without a recompile and draws what the eager env draws."""
    compiled_env, eager_env = make(name), make(name)
    step = torch.compile(compiled_env.step, fullgraph=True, backend="eager")
    actions = iter(random_actions(eager_env, 6 * compiled_env.max_episode_steps))
    param = compiled_env.randomization.params[0]
    with torch._dynamo.config.patch(error_on_recompile=True):
        for low, high in ((0.5, 2.0), (1.0, 1.0), (0.25, 3.0)):
            for env in (compiled_env, eager_env):
                env.set_randomize_range(param, low, high)
            for _ in range(2 * compiled_env.max_episode_steps):
                action = next(actions)
                assert_steps_agree(step(action), eager_env.step(action), tolerance(name))
    assert compiled_env.randomization.ranges[compiled_env.randomization.names[0]] == (0.25, 3.0)


def test_compiled_step_writes_state_in_place():
    """A CUDA graph replays fixed addresses: stepping must update the env's tensors, never rebind them."""
    env = make("push_cube_random_terminate")
    step = torch.compile(env.step, fullgraph=True, backend="eager")

    def tensors(obj: object, prefix: str = "") -> dict[str, int]:
        found = {}
        for key, value in vars(obj).items():
            if isinstance(value, torch.Tensor):
                found[prefix + key] = value.data_ptr()
            elif key in ("_resets", "_starts"):
                found.update(tensors(value, f"{prefix}{key}."))
        return found

    before = tensors(env)
    assert {"_state", "_steps", "_ever_success", "_resets.episode", "_resets.key_hash"} <= before.keys()
    for action in random_actions(env, 20):
        step(action)
    env.reset(seed=1)
    env.load_state_dict(env.state_dict())
    step(action)
    assert tensors(env) == before


@pytest.mark.parametrize(("name", "overrides"), [
    ("cartpole", {}),
    # float64: contact amplifies rounding ~2e4-fold over an episode (measured with 2-ulp perturbations per
    # step), so float32 runs differ by up to ~1e-3 after 50 steps; in float64 the same amplification leaves
    # ~1e-11. Two substeps and solver sweeps (instead of 5 and 4) keep the cold compile short; the loop
    # bodies, hence the generated code per substep, are the same.
    ("push_cube_joint_aligned", {"physics_dtype": "float64", "substeps": 2, "solver_iterations": 2,
                                 "max_speed": 0.3, "max_joint_delta": 0.025}),
    ("push_cube_randomized", {"physics_dtype": "float64", "substeps": 2, "solver_iterations": 2, "max_speed": 0.2}),
])
def test_inductor_step_matches_eager(name, overrides):
    """Generated kernels (fused, FMA-contracted, other trig routines) change float64 results by a few ulp per
    step; with resets every few steps the float32 observations then agree to 1e-6 and every flag exactly."""
    compiled_env, eager_env = make(name, **overrides), make(name, **overrides)
    step = torch.compile(compiled_env.step, fullgraph=True)
    with torch._dynamo.config.patch(error_on_recompile=True):
        for action in random_actions(eager_env, 3 * compiled_env.max_episode_steps):
            assert_steps_agree(step(action), eager_env.step(action), tol=1e-6)
        compiled_env.reset(seed=4, group_size=2)
        eager_env.reset(seed=4, group_size=2)
        for action in random_actions(eager_env, compiled_env.max_episode_steps, seed=1):
            assert_steps_agree(step(action), eager_env.step(action), tol=1e-6)
    torch.testing.assert_close(compiled_env.state_dict()["state"], eager_env.state_dict()["state"], rtol=0,
                               atol=1e-9)


# --- CUDA graphs ------------------------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("name", CONFIGS)
def test_cuda_graph_replays_of_a_captured_step_equal_eager_steps(name):
    """A collector may capture ``env.step`` (with ``policy.act``) in a CUDA graph once and replay it: the replays
    must advance the env exactly like eager steps, auto-resets included (capture fails on any host sync)."""
    graph_env, eager_env = make(name, device="cuda"), make(name, device="cuda")
    actions = [a.cuda() for a in random_actions(eager_env, 3 * eager_env.max_episode_steps + 2)]
    static_action = actions[0].clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up steps off the capture, as torch.cuda.graph asks
        for action in actions[:2]:
            assert_steps_agree(graph_env.step(action), eager_env.step(action), tolerance(name))
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = graph_env.step(static_action)
    for action in actions[2:]:
        static_action.copy_(action)
        graph.replay()
        assert_steps_agree(captured, eager_env.step(action), tolerance(name))


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["cartpole", "push_cube_joint_aligned"])
def test_reduce_overhead_runs_the_step_as_cuda_graphs(name):
    """``mode="reduce-overhead"``: no cudagraph skip ("mutated inputs": the env's buffers are marked static, by
    CartPole's fast paths), no recompile, and eager results (float64 push_cube: see
    test_inductor_step_matches_eager)."""
    overrides = {} if name == "cartpole" else {"physics_dtype": "float64"}
    compiled_env = add_fast_paths(make(name, device="cuda", **overrides))
    eager_env = make(name, device="cuda", **overrides)
    step = torch.compile(compiled_env.step, fullgraph=True, mode="reduce-overhead")
    torch._dynamo.utils.counters.clear()
    with torch._inductor.config.patch({"triton.cudagraph_or_error": True}), \
            torch._dynamo.config.patch(error_on_recompile=True):
        for action in random_actions(eager_env, 3 * eager_env.max_episode_steps):
            action = action.cuda()
            assert_steps_agree(step(action), eager_env.step(action), tol=1e-6)  # before the next replay reuses it
    assert torch._dynamo.utils.counters["inductor"]["cudagraph_skips"] == 0
