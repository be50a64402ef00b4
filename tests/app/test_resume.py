"""Continuing a run directory under a changed config: what differs, what is refused, and the one-line fix."""

import pytest

from embodirl.app.resume import check_resume_config, config_changes
from embodirl.errors import CheckpointError


def test_config_changes_lists_every_differing_leaf():
    old = {"algo": {"learning_rate": 0.002, "num_epochs": 2}, "seed": 0, "env": {"num_envs": 256}}
    new = {"algo": {"learning_rate": 0.001, "num_epochs": 2}, "seed": 0, "env": {"num_envs": 256, "extra": 1}}
    assert config_changes(old, new) == [("algo.learning_rate", 0.002, 0.001), ("env.extra", "<absent>", 1)]


def test_resume_config_change_is_refused_unless_allowed(tmp_path):
    old = {"algo": {"learning_rate": 0.002}, "trainer": {"total_env_steps": 100}, "logger": {"console": "auto"}}
    budget_only = {"algo": {"learning_rate": 0.002}, "trainer": {"total_env_steps": 200}, "logger": {"console": "none"}}
    assert check_resume_config(tmp_path, old, budget_only, allow=False) == [
        "logger.console 'auto' -> 'none'", "trainer.total_env_steps 100 -> 200"]
    new_lr = {**budget_only, "algo": {"learning_rate": 0.001}}
    with pytest.raises(CheckpointError) as info:
        check_resume_config(tmp_path, old, new_lr, allow=False)
    text = str(info.value)
    assert "algo.learning_rate 0.002 -> 0.001" in text and "trainer.allow_config_change=true" in text
    assert "total_env_steps" not in text  # only the refused keys are listed
    assert "algo.learning_rate 0.002 -> 0.001" in check_resume_config(tmp_path, old, new_lr, allow=True)


def test_a_run_from_before_the_stop_and_eval_keys_can_be_continued_with_them(tmp_path):
    # A checkpoint written before trainer.stop_on / callbacks / best_* / eval_env_overrides and env.solved_* existed.
    old = {"env": {"num_envs": 8}, "trainer": {"total_env_steps": 100}}
    new = {"env": {"num_envs": 8, "solved_metric": None, "solved_threshold": 400.0},
           "trainer": {"total_env_steps": 100, "stop_on": [], "callbacks": [], "best_metric": None, "best_mode": "max"},
           "eval": {"env_overrides": {"max_episode_steps": 1000}}}
    assert len(check_resume_config(tmp_path, old, new, allow=False)) == 7


def test_a_run_from_before_the_evaluation_keys_moved_to_eval_continues_under_their_new_names(tmp_path):
    # Until issue 21 the evaluation's cadence and sizes were trainer keys and the eval node held only videos.
    old = {"trainer": {"total_env_steps": 100, "eval_every_env_steps": 50, "num_eval_envs": 20,
                       "num_eval_episodes": 20, "eval_env_overrides": None},
           "eval": {"_target_": "embodirl.training.video.VideoSettings", "video": False}}
    new = {"trainer": {"total_env_steps": 100},
           "eval": {"_target_": "embodirl.training.evaluation.PeriodicEvaluation", "every_env_steps": 50,
                    "num_envs": 20, "num_episodes": 20, "env_overrides": None, "video": False}}
    (change,) = check_resume_config(tmp_path, old, new, allow=False)  # only the eval node's class is new
    assert change.startswith("eval._target_ 'embodirl.training.video.VideoSettings' -> ")
    # The number of evaluation envs could not change under its old name, and cannot under its new one.
    with pytest.raises(CheckpointError, match=r"eval.num_envs 20 -> 4"):
        check_resume_config(tmp_path, old, {**new, "eval": {**new["eval"], "num_envs": 4}}, allow=False)


def test_a_run_from_before_the_algorithm_keys_were_renamed_continues_under_their_new_names(tmp_path):
    # Until issue 21 the algorithms' keys were n_epochs, batch_size, accumulate_grad_batches, truncate_at_first_done.
    old = {"algo": {"n_epochs": 5, "batch_size": 512, "accumulate_grad_batches": 1, "truncate_at_first_done": True}}
    new = {"algo": {"num_epochs": 5, "minibatch_size": 512, "accumulate_minibatches": 1, "first_episode_only": True}}
    assert check_resume_config(tmp_path, old, new, allow=False) == []
    with pytest.raises(CheckpointError, match=r"algo.minibatch_size 512 -> 256"):
        check_resume_config(tmp_path, old, {"algo": {**new["algo"], "minibatch_size": 256}}, allow=False)


def test_keys_a_newer_embodirl_added_never_lock_an_older_run_directory(tmp_path):
    # Upgrading embodirl adds keys (e.g. algo.dual_clip_coef, env.hide_velocities); the old checkpoint lacks them.
    old = {"algo": {"learning_rate": 0.002}, "env": {"num_envs": 8}}
    new = {"algo": {"learning_rate": 0.002, "dual_clip_coef": None, "shuffle_minibatches": True},
           "env": {"num_envs": 8, "hide_velocities": False}}
    assert check_resume_config(tmp_path, old, new, allow=False) == [
        "algo.dual_clip_coef '<absent>' -> None", "algo.shuffle_minibatches '<absent>' -> True",
        "env.hide_velocities '<absent>' -> False"]
    with pytest.raises(CheckpointError, match=r"algo\.learning_rate"):  # a key both know still may not change
        check_resume_config(tmp_path, old, {**new, "algo": {**new["algo"], "learning_rate": 0.001}}, allow=False)


def test_a_key_the_config_does_not_know_is_refused_and_values_read_from_a_file_stay_on_one_line(tmp_path):
    new = {"seed": 0, "logger": {"console": "none"}, "eval": {"env_overrides": None}}
    planted = {**new, "logger": {"console": "none", "note": "'$(touch X)\nINJECTED"}}  # logger.* may change
    with pytest.raises(CheckpointError, match=r"logger\.note \"'\$\(touch X\)\\nINJECTED\" -> '<absent>'") as exc:
        check_resume_config(tmp_path, planted, new, allow=False)
    assert "\n" not in str(exc.value)
    (change,) = check_resume_config(tmp_path, {**planted, "seed\nrm -rf ~": 1}, new, allow=True)[1:]
    assert "\n" not in change and change.startswith("seed rm -rf ~ 1 -> ")
    # The user's own free-form keys may still come and go like any changeable value.
    assert "eval.env_overrides.friction 2 -> '<absent>'" in check_resume_config(
        tmp_path, {**new, "eval": {"env_overrides": {"friction": 2}}}, new, allow=False)


def test_starting_from_a_checkpoint_file_refuses_another_config_with_the_overrides_that_match_it(tmp_path):
    old = {"seed": 0, "algo": {"learning_rate": 0.002, "clip_coef": 0.2}, "trainer": {"resume": None}}
    new = {"seed": 1, "algo": {"learning_rate": 0.001, "clip_coef": 0.2}, "trainer": {"resume": "a.pt"}}
    with pytest.raises(CheckpointError) as exc:
        check_resume_config(tmp_path, old, new, allow=False, source="trainer.resume='a.pt'")
    assert str(exc.value).startswith("trainer.resume='a.pt' holds a run trained with a different config "
                                     "(algo.learning_rate 0.002 -> 0.001, seed 0 -> 1)")
    assert "Fix: pass algo.learning_rate=0.002 seed=0 to start from it as it was trained" in str(exc.value)
    assert check_resume_config(tmp_path, old, new, allow=True, source="trainer.resume='a.pt'") == [
        "algo.learning_rate 0.002 -> 0.001", "seed 0 -> 1", "trainer.resume None -> 'a.pt'"]
