"""Ctrl-C during ``ttsq narrate`` is taken at the narration's checkpoints (narration.interrupts)."""

from __future__ import annotations

import os
import signal
import time

import pytest

from narration.interrupts import Checkpoints


def test_a_first_ctrl_c_waits_for_the_next_checkpoint() -> None:
    with Checkpoints() as checkpoints:
        os.kill(os.getpid(), signal.SIGINT)  # handled at once, in this (the main) thread: no exception here
        started = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            checkpoints.sleep(30)
        assert time.monotonic() - started < 1  # the wait ends with the Ctrl-C


def ctrl_c_twice() -> None:
    os.kill(os.getpid(), signal.SIGINT)  # asks to stop
    os.kill(os.getpid(), signal.SIGINT)  # raises here, in the handler
    time.sleep(5)


def test_a_second_ctrl_c_interrupts_at_once() -> None:
    with Checkpoints(), pytest.raises(KeyboardInterrupt):
        ctrl_c_twice()


def test_the_previous_handler_is_back_afterwards() -> None:
    before = signal.getsignal(signal.SIGINT)
    with Checkpoints():
        assert signal.getsignal(signal.SIGINT) is not before
    assert signal.getsignal(signal.SIGINT) is before
