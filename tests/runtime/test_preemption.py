"""Stop signals: immediate before training, deferred to the iteration boundary during it, chained to submitit's."""

import os
import signal

import pytest

from embodirl.runtime.preemption import PreemptedError, StopSignals


def _send(signum):
    os.kill(os.getpid(), signum)  # delivered before os.kill returns (the handler runs in this thread)


def test_immediate_mode_stops_at_once():
    with StopSignals(defer=False), pytest.raises(KeyboardInterrupt):
        _send(signal.SIGINT)
    with StopSignals(defer=False), pytest.raises(PreemptedError, match="before training started"):
        _send(signal.SIGTERM)


def test_first_ctrl_c_is_deferred_and_a_second_aborts():
    with StopSignals(defer=True) as signals:
        _send(signal.SIGINT)
        assert signals.interrupted and not signals.requested
        with pytest.raises(KeyboardInterrupt):
            _send(signal.SIGINT)


def test_deferred_preemption_hands_over_to_the_handler_installed_before_every_guard():
    sigint = signal.getsignal(signal.SIGINT)  # Python's default_int_handler, or SIG_IGN under nohup and `cmd &`
    calls = []
    previous = signal.signal(signal.SIGUSR2, lambda signum, frame: calls.append(signum))
    try:
        with StopSignals(defer=False), StopSignals(defer=True) as inner:
            _send(signal.SIGUSR2)
            assert inner.requested and calls == []  # only recorded
            with pytest.raises(PreemptedError, match="after saving"):
                inner.hand_over()
        assert calls == [signal.SIGUSR2]  # submitit's requeue handler, not the outer guard's
    finally:
        signal.signal(signal.SIGUSR2, previous)
    assert signal.getsignal(signal.SIGINT) is sigint  # everything restored


def test_a_signal_that_comes_while_handing_over_lets_the_requeue_finish():
    """``scontrol requeue`` (inside submitit's handler) makes SLURM send SIGTERM at once: it used to reach the outer
    guard, which raised "stopped on SIGTERM before training started" out of submitit's handler, cutting the requeue
    short of its log line and its exit, in a run that had trained and saved."""
    done = []

    def submitit_requeue(signum, frame):  # as submitit's: requeue (SLURM answers with SIGTERM), log it, exit
        _send(signal.SIGTERM)
        done.append("requeued")
        raise SystemExit(-1)

    submitit = {signal.SIGUSR2: submitit_requeue, signal.SIGTERM: lambda signum, frame: done.append("bypassed")}
    previous = {sig: signal.signal(sig, handler) for sig, handler in submitit.items()}
    try:
        with StopSignals(defer=False) as outer, StopSignals(defer=True) as inner, pytest.raises(SystemExit):
            _send(signal.SIGUSR2)
            inner.hand_over()
        assert done == ["requeued"] and not outer.requested  # the SIGTERM changed nothing
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
