"""compile=true for the off-policy family: the critic and actor losses are one graph each (with their backward),
never recompiled across updates (delayed actor steps skipped, the buffer growing), and an update gives the eager
update's numbers (with curiosity too: its bonus, added to the sampled rewards eagerly, is data to the compiled
critic loss). Inductor's random numbers differ from eager's unless ``fallback_random`` is set, so the
comparisons set it."""

import copy

import pytest
import torch

from embodirl.app.build import build_components
from tests.conftest import compose_config, train_summary

SMALL = ["device=cpu", "env=push_cube", "env.num_envs=8", "algo.num_steps=4", "algo.minibatch_size=16",
         "algo.learning_starts=32", "algo.critic_hidden_sizes=[16]", "policy.hidden_sizes=[16]", "eval.num_envs=2",
         "trainer.total_env_steps=1024"]
CASES = {"sac": ["algo=sac"], "fasttd3_c51": ["algo=fasttd3"], "fasttd3_twin": ["algo=fasttd3", "algo.critic=twin"],
         "sac_rnd": ["algo=sac", "algo.rnd.weight=0.5", "algo.rnd.hidden_sizes=[16]"]}  # curiosity runs eager


@pytest.fixture
def fresh_dynamo():
    import torch._dynamo  # here, not at the top: collecting the fast tier must not import dynamo (the slowest import)
    import torch._inductor.config

    torch._dynamo.reset()
    with torch._dynamo.config.patch(error_on_recompile=True), torch._inductor.config.patch(fallback_random=True):
        yield
    torch._dynamo.reset()


def _built(case: str, compile: bool):
    parts = build_components(compose_config([*SMALL, *CASES[case], f"compile={str(compile).lower()}"]))
    parts.collector.reset(seed=0)
    return parts


def _updates(parts, rollouts, seed: int = 3):
    torch.manual_seed(seed)
    return [parts.algo.update(rollout) for rollout in rollouts]


def test_the_off_policy_algorithms_name_their_compiled_steps():
    for case in CASES:
        algo = _built(case, compile=False).algo
        assert algo.compiled_steps == ("critic_loss", "actor_loss"), case
        assert "critic_loss" not in vars(algo)  # eager: the plain methods, nothing wrapped


@pytest.mark.usefixtures("fresh_dynamo")
@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_the_compiled_losses_are_one_graph_never_recompile_and_match_eager(case):
    eager = _built(case, compile=False)
    rollouts = [eager.collector.collect() for _ in range(3)]  # 96 transitions: updates from the second rollout
    start = copy.deepcopy((eager.algo.policy.state_dict(), eager.algo.state_dict()))
    batch = None
    for rollout in rollouts[:2]:
        eager.algo.update(rollout)
        batch = eager.algo.buffer.sample(16)
    for name in ("critic_loss", "actor_loss"):
        arg = batch if name == "critic_loss" else eager.algo.features(batch["obs"]).detach()
        explain = torch._dynamo.explain(getattr(eager.algo, name))(arg)
        assert (explain.graph_count, explain.graph_break_count) == (1, 0), (name, explain.break_reasons)

    eager = _built(case, compile=False)
    compiled = _built(case, compile=True)
    for parts in (eager, compiled):
        parts.algo.policy.load_state_dict(start[0])
        parts.algo.load_state_dict(start[1])
    expected, got = _updates(eager, rollouts), _updates(compiled, rollouts)  # 3 x 4 gradient steps, the actor every 2nd
    assert compiled.algo.num_updates == 12
    for want, have in zip(expected, got, strict=True):
        assert set(have) == set(want)
        for key in want:
            assert have[key] == pytest.approx(want[key], rel=1e-4, abs=1e-6), key
    for key, value in compiled.algo.policy.state_dict().items():
        torch.testing.assert_close(value, eager.algo.policy.state_dict()[key], rtol=1e-4, atol=1e-6)
    for name, module in compiled.algo.networks().items():
        for key, value in module.state_dict().items():
            torch.testing.assert_close(value, eager.algo.networks()[name].state_dict()[key], rtol=1e-4, atol=1e-6)


@pytest.mark.usefixtures("fresh_dynamo")
@pytest.mark.slow
def test_a_compiled_sac_run_trains_through_the_command_line(tmp_path, monkeypatch):
    summary = train_summary(monkeypatch, tmp_path / "run", [
        *SMALL, "algo=sac", "compile=true", "trainer.total_env_steps=128", "logger.console=none",
        "logger.tensorboard=false"])
    assert summary["status"] == "completed"
    assert summary["diag/num_updates"] > 0
