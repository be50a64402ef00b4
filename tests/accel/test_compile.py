"""torch.compile of the hot steps on the CPU: one graph, no recompiles, the same numbers as eager.

CUDA graphs need a GPU (tests marked ``gpu``); everything else a GPU run relies on is checked here.
Inductor's random numbers differ from eager's unless ``fallback_random`` is set, so the comparisons set it.
"""

import copy

import pytest
import torch

from embodirl.accel.compile import Acceleration, resolve_acceleration
from embodirl.accel.loop import fused_steps
from embodirl.app.build import build_components
from embodirl.errors import ConfigError
from tests.conftest import compose_config

ROLLOUT_KEYS = ("obs", "action", "sample_log_prob", "value", "reward", "done", "final_value")


def test_auto_compiles_and_captures_on_cuda_only():
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert resolve_acceleration("auto", "auto", cpu) == Acceleration(False, False)
    assert resolve_acceleration("auto", "auto", cuda) == Acceleration(True, True)
    assert resolve_acceleration("auto", "auto", cuda, world_size=2) == Acceleration(True, False)
    assert resolve_acceleration(True, "auto", cpu) == Acceleration(True, False)
    with pytest.raises(ConfigError, match="cuda_graphs=True is invalid"):
        resolve_acceleration("auto", True, cpu)
    with pytest.raises(ConfigError, match="compile='yes' is invalid"):
        resolve_acceleration("yes", "auto", cpu)


@pytest.fixture
def fresh_dynamo():
    import torch._dynamo  # here, not at the top: collecting the fast tier must not import dynamo (the slowest import)
    import torch._inductor.config

    torch._dynamo.reset()
    with torch._dynamo.config.patch(error_on_recompile=True), \
            torch._inductor.config.patch(fallback_random=True):
        yield
    torch._dynamo.reset()


def _compiled_twin(algo):
    """The same algorithm (class, keys, policy) with its update compiled: what compile=true builds."""
    return type(algo)(algo.cfg, policy=algo.policy, device=algo.device, total_env_steps=algo.total_env_steps,
                      accel=Acceleration(compile=True))


UPDATE_CASES = {"ppo": ["algo.num_steps=16", "algo.minibatch_size=96"],
                "grpo": ["algo.kl_coef=0.02", "algo.minibatch_size=96"],
                "a2c": ["algo.num_steps=16"],  # A2C's default: the whole rollout in one step
                # curiosity rewrites the rewards eagerly before the compiled prepare and trains its own predictor
                "ppo_rnd": ["algo.num_steps=16", "algo.minibatch_size=96", "algo.rnd.weight=1.0"],
                "ppo_chunks": ["env=push_cube", "algo.num_steps=16", "algo.minibatch_size=96",
                               "policy.action_chunk=4", "policy.chunk_execute=2"]}


@pytest.mark.usefixtures("fresh_dynamo")
@pytest.mark.slow
@pytest.mark.parametrize("algo", list(UPDATE_CASES))
def test_the_compiled_update_is_one_graph_and_matches_eager(algo):
    overrides = ["device=cpu", "env.num_envs=32", f"algo={algo.split('_')[0]}", *UPDATE_CASES[algo]]
    parts = build_components(compose_config(overrides))
    parts.collector.reset(seed=0)
    rollout = parts.collector.collect()
    eager_algo = parts.algo
    start = copy.deepcopy((eager_algo.policy.state_dict(), eager_algo.state_dict()))
    torch.manual_seed(1)
    eager = eager_algo.update(rollout)
    eager_params = copy.deepcopy(eager_algo.policy.state_dict())
    explain = torch._dynamo.explain(eager_algo.steps.minibatch_loss)(torch.arange(96), torch.ones(96))
    assert (explain.graph_count, explain.graph_break_count) == (1, 0), explain.break_reasons

    eager_algo.policy.load_state_dict(start[0])
    algo_ = _compiled_twin(eager_algo)
    algo_.load_state_dict(start[1])
    torch.manual_seed(1)
    compiled = algo_.update(rollout)
    algo_.update(rollout)  # a second update: no recompile (error_on_recompile is set)
    for key in eager:
        assert compiled[key] == pytest.approx(eager[key], rel=1e-4, abs=1e-6), key
    if algo_.compile_prepare:  # prepare, its copy into the buffers and the rollout's diagnostics: one graph too
        explain = torch._dynamo.explain(algo_.steps._prepare_into)(rollout.filter_non_tensor_data())
        assert (explain.graph_count, explain.graph_break_count) == (1, 0), explain.break_reasons
    algo_.policy.load_state_dict(start[0])
    algo_.load_state_dict(start[1])
    torch.manual_seed(1)
    algo_.update(rollout)
    for key, value in algo_.policy.state_dict().items():
        torch.testing.assert_close(value, eager_params[key], rtol=1e-4, atol=1e-6)  # float reassociation only


# --- collection and evaluation steps ---------------------------------------------------------------------------
COLLECTION_CASES = {
    "cartpole_ppo": ["env=cartpole", "algo=ppo", "algo.num_steps=16"],
    "push_cube_ppo": ["env=push_cube", "algo=ppo", "algo.num_steps=16"],
    "push_cube_grpo": ["env=push_cube", "algo=grpo", "algo.group_size=4", "env.max_episode_steps=12"],
    "cartpole_gru": ["env=cartpole", "algo=ppo", "policy=actor_critic_rnn", "algo.num_steps=16", "algo.seq_len=8"],
    "cartpole_history_ppo": ["env=cartpole", "env.obs_history=3", "env.max_episode_steps=10", "algo=ppo",
                             "algo.num_steps=16"],  # episodes end and restart their histories inside the graph
    "push_cube_pixels_ppo": ["env=push_cube", "env.obs_mode=state_rgb", "algo=ppo", "algo.num_steps=16",
                             "policy.actor_keys=[rgb]", "policy.critic_keys=[state]"],
    "push_cube_ppo_chunks": ["env=push_cube", "algo=ppo", "algo.num_steps=16", "env.max_episode_steps=10",
                             "policy.action_chunk=4", "policy.chunk_execute=3"],  # episodes end mid-chunk
    "cartpole_grpo_chunks": ["env=cartpole", "algo=grpo", "algo.group_size=4", "env.max_episode_steps=20",
                             "policy.action_chunk=2"],
}


def _parts(case: str, compile: bool):
    return build_components(compose_config(["device=cpu", "env.num_envs=16", f"compile={str(compile).lower()}",
                                 "eval.num_envs=4", *COLLECTION_CASES[case]]))


@pytest.mark.usefixtures("fresh_dynamo")
@pytest.mark.slow
@pytest.mark.parametrize("case", list(COLLECTION_CASES))
def test_the_collection_and_evaluation_steps_are_one_graph_each(case):
    parts = _parts(case, compile=False)
    parts.collector.reset(seed=0)
    for part in (parts.collector, parts.evaluator):
        explain = torch._dynamo.explain(part.loop.run)()  # one step: act, env step, records written, carry copied
        assert (explain.graph_count, explain.graph_break_count) == (1, 0), (type(part), explain.break_reasons)
        if fused_steps(len(explain.graphs[0].graph.nodes)) == 1:
            continue  # a step this large is never compiled in blocks (push_cube's)
        # a compiled block: steps unrolled, the carry handed from one to the next inside the graph (two show it;
        # each further step only repeats the trace, the slowest part of this test)
        explain = torch._dynamo.explain(part.loop.run_block)(2)
        assert (explain.graph_count, explain.graph_break_count) == (1, 0), (type(part), explain.break_reasons)


@pytest.mark.usefixtures("fresh_dynamo")
@pytest.mark.slow
@pytest.mark.parametrize("case", ["cartpole_ppo", "push_cube_grpo", "cartpole_history_ppo", "push_cube_ppo_chunks",
                                  "cartpole_grpo_chunks"])
def test_a_compiled_collection_yields_the_eager_rollout_and_never_recompiles(case):
    """Inductor-compiled steps over several rollouts (auto-resets, group resets among them) against eager ones."""
    eager, compiled = _parts(case, compile=False), _parts(case, compile=True)
    assert compiled.compile_s > 0 and compiled.accel.compile
    compiled.policy.load_state_dict(eager.policy.state_dict())
    for parts in (eager, compiled):
        parts.collector.reset(seed=3)
    for _ in range(3):  # 48 steps: CartPole's random early episodes end; GRPO resets its groups every rollout
        torch.manual_seed(7)
        want = eager.collector.collect().clone()
        torch.manual_seed(7)
        got = compiled.collector.collect()
        for key in ROLLOUT_KEYS:
            torch.testing.assert_close(got.get(key), want.get(key), rtol=1e-5, atol=1e-5, msg=key)
    assert compiled.collector.pop_metrics() == pytest.approx(eager.collector.pop_metrics(), rel=1e-5)
    torch.manual_seed(9)
    want = eager.evaluator.evaluate(4, seed=5)
    torch.manual_seed(9)
    assert compiled.evaluator.evaluate(4, seed=5) == pytest.approx(want, rel=1e-5)


@pytest.mark.usefixtures("fresh_dynamo")
@pytest.mark.gpu
@pytest.mark.parametrize("compile", [False, True])
@pytest.mark.parametrize("case", list(COLLECTION_CASES))
def test_a_collection_step_never_syncs_with_the_host_on_cuda(case, compile):
    parts = build_components(compose_config(["device=cuda", "env.num_envs=64", f"compile={str(compile).lower()}",
                                  "cuda_graphs=false", "eval.num_envs=4", *COLLECTION_CASES[case]]))
    parts.collector.reset(seed=0)
    parts.collector.loop()  # first call: lazy initialisation may sync
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")  # any synchronising CUDA call raises
    try:
        for _ in range(10):  # auto-resets among them
            parts.collector.loop()
        parts.evaluator.loop()
    finally:
        torch.cuda.set_sync_debug_mode(0)


@pytest.mark.usefixtures("fresh_dynamo")
@pytest.mark.slow
def test_knobs_keep_the_update_one_graph_without_recompiles():
    """Autocast inside the loss, accumulation, dual clip, reward scaling and an entropy schedule (a tensor changed
    in place between updates) compile once: error_on_recompile is set and two updates run with different
    ent_coef."""
    overrides = ["device=cpu", "env.num_envs=32", "algo.num_steps=16", "algo.minibatch_size=128", "algo.amp=bf16",
                 "algo.accumulate_minibatches=2", "algo.dual_clip_coef=3.0", "algo.ent_coef=0.01",
                 "algo.ent_coef_schedule=[[0,0.01],[2048,0.002]]", "algo.ent_coef_schedule_kind=interp",
                 "algo.lr_schedule=cosine", "algo.normalize_rewards=true"]
    parts = build_components(compose_config(overrides))
    parts.collector.reset(seed=0)
    parts.algo.update(parts.collector.collect())  # eager: the samples the explained loss reads
    explain = torch._dynamo.explain(parts.algo.steps.minibatch_loss)(torch.arange(128), torch.ones(128))
    assert (explain.graph_count, explain.graph_break_count) == (1, 0)
    algo = _compiled_twin(parts.algo)
    first = algo.update(parts.collector.collect())
    second = algo.update(parts.collector.collect())
    # 32 x 16 = 512 env steps per update; interp from 0.01 at 0 to 0.002 at 2048
    assert (first["train/ent_coef"], second["train/ent_coef"]) == pytest.approx((0.01, 0.008))
