"""While a run trains, full garbage collections skip the objects built before it; afterwards they are collected
again."""

import gc
import weakref

from embodirl.accel.garbage import setup_objects_frozen
from embodirl.app.run import run_training
from embodirl.training.callbacks import Callback
from tests.conftest import compose_config

_TRACKED_DURING_TRAINING: list[int] = []


class CountTracked(Callback):
    """Records how many objects a full collection would walk, at every iteration."""

    def on_iteration(self, record: dict) -> None:
        _TRACKED_DURING_TRAINING.append(len(gc.get_objects()))


class _Node:
    def __init__(self) -> None:
        self.me = self  # a reference cycle: only the cyclic collector frees it


def test_a_training_run_hides_its_setup_objects_from_the_collector_until_it_ends(tmp_path, tiny):
    _TRACKED_DURING_TRAINING.clear()
    before = len(gc.get_objects())
    run_training(compose_config([*tiny, "trainer.total_env_steps=384",
                                 "trainer.callbacks=[{_target_: tests.accel.test_garbage.CountTracked}]"]), tmp_path)
    # Unfrozen, every full collection in training would walk every object torch, Hydra and the run's set-up
    # created, in the middle of an update; frozen, only what the run allocated since is walked.
    assert len(_TRACKED_DURING_TRAINING) == 3
    assert max(_TRACKED_DURING_TRAINING) < before / 5
    assert gc.get_freeze_count() == 0
    assert len(gc.get_objects()) > before / 2


def test_frozen_objects_are_skipped_and_their_garbage_is_collected_after_the_block():
    node = _Node()
    ref = weakref.ref(node)
    with setup_objects_frozen() as froze:
        assert froze and gc.get_freeze_count() > 0
        assert not any(o is node for o in gc.get_objects())
        del node
        gc.collect()
        assert ref() is not None  # frozen: not collected while the block runs
    assert gc.get_freeze_count() == 0
    gc.collect()
    assert ref() is None


def test_an_existing_freeze_is_left_to_the_code_that_made_it():
    gc.freeze()
    try:
        count = gc.get_freeze_count()
        with setup_objects_frozen() as froze:
            assert not froze
        assert gc.get_freeze_count() == count
    finally:
        gc.unfreeze()


def test_a_finished_run_frees_its_collector_and_rollout_before_run_training_returns(tmp_path, tiny, monkeypatch):
    import embodirl.collect.collector

    refs = []
    init = embodirl.collect.collector.Collector.__init__

    def recording_init(self, *args, **kwargs):
        init(self, *args, **kwargs)
        refs.append(weakref.ref(self))

    monkeypatch.setattr(embodirl.collect.collector.Collector, "__init__", recording_init)
    run_training(compose_config([*tiny, "trainer.total_env_steps=128"]), tmp_path)
    # The collector holds a bound method of itself (its step): only the cyclic collector frees it and its rollout.
    assert len(refs) == 1 and refs[0]() is None
