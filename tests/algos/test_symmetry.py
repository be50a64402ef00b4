"""algo.symmetry: the augmented minibatch, the mirror loss, PPO's hook, the checks of a mirror, compiled == eager."""

import copy

import pytest
import torch
from tensordict import TensorDict

from embodirl.algos import symmetry
from embodirl.config.algos import SymmetryConfig
from embodirl.envs.cartpole_symmetry import mirror as cartpole_mirror
from embodirl.envs.push_cube.symmetry import mirror as push_cube_mirror
from embodirl.errors import ConfigError
from tests.conftest import TINY, algo_on_cartpole

SLOW = pytest.mark.slow  # the rest of a case table: its representative stays in the fast tier


PUSH_CUBE = "embodirl.envs.push_cube.symmetry.mirror"
CARTPOLE = "embodirl.envs.cartpole_symmetry.mirror"


def _keys(mirror: str, augment: bool = True, loss_coef: float = 0.0) -> list[str]:
    return [f"algo.symmetry.mirror={mirror}", f"algo.symmetry.augment={str(augment).lower()}",
            f"algo.symmetry.loss_coef={loss_coef}"]


def test_the_augmented_minibatch_is_the_batch_then_its_mirror_image_with_the_originals_targets():
    state = torch.tensor([[0.5, 0.25, 0.125, 2.0], [1.0, 2.0, 3.0, 4.0]])
    batch = TensorDict({"obs": TensorDict({"state": state}, [2]),
                        "action": torch.tensor([1, 0]), "advantage": torch.tensor([0.5, -1.0]),
                        "returns": torch.tensor([2.0, 3.0]), "value": torch.tensor([1.5, 2.5]),
                        "sample_log_prob": torch.tensor([-0.1, -2.0]), "weight": torch.tensor([1.0, 0.0])}, [2])
    out = symmetry.augment(batch, cartpole_mirror)
    assert out.batch_size == torch.Size([4])
    assert out["obs", "state"][2:].tolist() == [[-0.5, -0.25, -0.125, -2.0], [-1.0, -2.0, -3.0, -4.0]]
    assert out["action"].tolist() == [1, 0, 0, 1]
    for key in ("advantage", "returns", "value", "sample_log_prob", "weight"):
        assert out[key].tolist() == batch[key].tolist() * 2, key
    assert out["obs", "state"][:2].tolist() == batch["obs", "state"].tolist()


def test_the_mirror_loss_by_hand():
    # ee mode: mirror(mu(o)) = (1, -2) for mu(o) = (1, 2); mu(mirror(o)) = (1, 1): ((1-1)^2 + (1+2)^2) / 2 = 4.5.
    # The second sample has mu(mirror(o)) = mirror(mu(o)): 0; the third is padding (weight 0).
    obs = TensorDict({"state": torch.zeros(3, 17)}, [3])
    mean = torch.tensor([[1.0, 2.0], [0.5, 0.5], [9.0, 9.0]], requires_grad=True)
    mirrored_obs_mean = torch.tensor([[1.0, 1.0], [0.5, -0.5], [0.0, 0.0]], requires_grad=True)
    loss = symmetry.mirror_loss(mean, mirrored_obs_mean, obs, torch.tensor([1.0, 1.0, 0.0]), push_cube_mirror)
    assert float(loss) == pytest.approx(4.5 / 2)
    loss.backward()
    assert mean.grad is None  # the mirrored mean is the target: the gradient flows through mu(mirror(o)) only
    assert mirrored_obs_mean.grad.tolist() == [[0.0, 1.5], [0.0, 0.0], [0.0, 0.0]]  # d/dy of 3^2/2/2, weighted


def test_ppo_trains_the_policy_and_value_on_both_halves_and_keeps_entropy_and_kl_on_the_originals():
    plain, collector = algo_on_cartpole("ppo")
    sym, _ = algo_on_cartpole("ppo", *_keys(CARTPOLE))
    sym.policy.load_state_dict(plain.policy.state_dict())
    rollout = collector.collect()
    batch = plain.prepare(rollout)[:32]
    batch.set("weight", torch.ones(32))
    doubled = symmetry.augment(batch, cartpole_mirror)
    with torch.no_grad():
        terms, on_both, on_originals = sym.loss(batch), plain.loss(doubled), plain.loss(batch)
    for key in ("loss/policy", "loss/value"):
        assert float(terms[key]) == pytest.approx(float(on_both[key]), rel=1e-6), key
    for key in ("loss/entropy", "diag/approx_kl", "diag/clip_fraction"):
        assert float(terms[key]) == pytest.approx(float(on_originals[key]), rel=1e-6, abs=1e-9), key
    assert float(on_both["loss/value"]) != pytest.approx(float(on_originals["loss/value"]), rel=1e-3)
    metrics = sym.update(rollout)
    assert set(sym.metric_names) == {k for k in metrics if k.startswith(("loss/", "diag/"))}


def test_the_mirror_loss_is_zero_for_a_symmetric_policy_and_logged_when_weighted():
    algo, collector = algo_on_cartpole("ppo", "env=push_cube", *_keys(PUSH_CUBE, augment=False, loss_coef=0.5))
    assert "loss/symmetry" in algo.metric_names
    batch = algo.prepare(collector.collect())[:64]
    batch.set("weight", torch.ones(64))
    with torch.no_grad():
        assert float(algo.loss(batch)["loss/symmetry"]) > 0
        last = algo.policy.actor[-1]
        last.weight.zero_()
        last.bias.zero_()  # mean action 0 everywhere: its own mirror image
        assert float(algo.loss(batch)["loss/symmetry"]) == 0.0
    assert "loss/symmetry" in algo.update(collector.collect())


def test_a_mirror_is_dry_run_on_the_envs_spaces_before_training():
    _, collector = algo_on_cartpole("ppo", "env=push_cube")
    env, dtype = collector.env, torch.float32
    symmetry.check_mirror(push_cube_mirror, PUSH_CUBE, env, dtype)  # a real reflection of push_cube passes
    with pytest.raises(ConfigError, match=r"algo.symmetry.mirror='embodirl.envs.cartpole_symmetry.mirror' is invalid"
                                          r".*it raised ValueError: CartPole's mirror reads 4"):
        symmetry.check_mirror(cartpole_mirror, CARTPOLE, env, dtype)
    with pytest.raises(ConfigError, match=r"applied twice, action is not its input"):
        symmetry.check_mirror(lambda obs, action: (obs, 2 * action), "my.twice", env, dtype)
    with pytest.raises(ConfigError, match=r"applied once, obs\['state'\] became \[8, 16\] torch.float32 \(expected "
                                          r"\[8, 17\]"):
        symmetry.check_mirror(lambda obs, action: (obs.apply(lambda x: x[:, 1:]), action), "my.cut", env, dtype)


def test_bad_symmetry_settings_are_refused_with_the_key():
    with pytest.raises(ConfigError, match=r"algo.symmetry.mirror='embodirl.nowhere.mirror' is invalid.*importing it "
                                          r"failed.*Fix: pass algo.symmetry.mirror=embodirl.envs.cartpole_symmetry"):
        algo_on_cartpole("ppo", *_keys("embodirl.nowhere.mirror"))
    with pytest.raises(ConfigError, match=r"algo.symmetry.loss_coef=0.5 is invalid: expected 0 with Discrete actions"):
        algo_on_cartpole("ppo", *_keys(CARTPOLE, loss_coef=0.5))
    with pytest.raises(ConfigError, match=r"algo.symmetry.augment=True is invalid.*recurrent policy"):
        algo_on_cartpole("ppo", "policy=actor_critic_rnn", "algo.num_steps=16", "algo.seq_len=8", *_keys(CARTPOLE))
    off = symmetry.load_mirror(SymmetryConfig(mirror=CARTPOLE), algo_on_cartpole("ppo")[0].policy)
    assert off is None  # named, but neither augmentation nor the loss is on: PPO runs as without it


@pytest.mark.parametrize(("overrides", "fragments"), [
    (["algo.symmetry.augment=true"], ["algo.symmetry.mirror=None is invalid",
                                      "Fix: pass algo.symmetry.mirror=embodirl.envs.cartpole_symmetry.mirror"]),
    pytest.param(["env=push_cube", *_keys(CARTPOLE)],
                 ["algo.symmetry.mirror='embodirl.envs.cartpole_symmetry.mirror'", "CartPole's mirror reads 4",
                  "env=push_cube with obs_mode=state: embodirl.envs.push_cube.symmetry.mirror"], marks=SLOW),
])
def test_bad_symmetry_input_gives_one_line_and_exit_2_and_its_fix_trains(cli, tmp_path, overrides, fragments):
    result = cli("embodirl-train", [*TINY, *overrides, f"hydra.run.dir={tmp_path / 'bad'}"])
    lines = result.err.strip().splitlines()
    assert result.code == 2 and len(lines) == 1 and lines[0].startswith("embodirl-train: error: "), result.err
    assert all(text in lines[0] for text in fragments), lines[0]
    assert not (tmp_path / "bad" / "metrics.jsonl").exists()
    fixed = [o for o in overrides if not o.startswith("algo.symmetry.mirror=")]
    mirror = PUSH_CUBE if "env=push_cube" in overrides else CARTPOLE  # what the line says for this env
    result = cli("embodirl-train", [*TINY, *fixed, f"algo.symmetry.mirror={mirror}", f"hydra.run.dir={tmp_path}"])
    assert result.code == 0, result.err
    assert (tmp_path / "metrics.jsonl").exists()


@pytest.mark.slow
def test_the_compiled_update_with_augmentation_and_mirror_loss_is_one_graph_and_matches_eager():
    import torch._dynamo  # here, not at the top: collecting the fast tier must not import dynamo (the slowest import)

    from embodirl.accel.compile import Acceleration

    eager_algo, collector = algo_on_cartpole("ppo", "env=push_cube", "algo.minibatch_size=64",
                                             *_keys(PUSH_CUBE, loss_coef=0.5))
    rollout = collector.collect()
    start = copy.deepcopy((eager_algo.policy.state_dict(), eager_algo.state_dict()))
    torch._dynamo.reset()
    eager_algo.steps.prepare(rollout)
    explain = torch._dynamo.explain(eager_algo.steps.minibatch_loss)(torch.arange(64), torch.ones(64))
    assert (explain.graph_count, explain.graph_break_count) == (1, 0), explain.break_reasons
    torch.manual_seed(1)
    eager = eager_algo.update(rollout)
    eager_params = copy.deepcopy(eager_algo.policy.state_dict())
    eager_algo.policy.load_state_dict(start[0])
    compiled_algo = type(eager_algo)(eager_algo.cfg, policy=eager_algo.policy, device=eager_algo.device,
                                     total_env_steps=eager_algo.total_env_steps, accel=Acceleration(compile=True))
    compiled_algo.load_state_dict(start[1])
    with torch._dynamo.config.patch(error_on_recompile=True):
        torch.manual_seed(1)
        compiled = compiled_algo.update(rollout)
        for key in eager:
            assert compiled[key] == pytest.approx(eager[key], rel=1e-4, abs=1e-6), key
        for key, value in compiled_algo.policy.state_dict().items():
            torch.testing.assert_close(value, eager_params[key], rtol=1e-4, atol=1e-6)
        compiled_algo.update(rollout)  # a second update: no recompile
    torch._dynamo.reset()
