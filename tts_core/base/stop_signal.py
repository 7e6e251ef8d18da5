"""A stop asked for by a signal, with nothing in the signal handler that takes a lock.

Python runs a signal handler in the main thread between two bytecodes, wherever that thread is,
inside a held lock included. ``threading.Event.set()`` takes the event's lock; a handler that calls
it while the main thread is inside ``Event.wait()`` holding that same lock waits for itself for
ever (``ttsq dev`` hung that way: every further SIGTERM stacked up in ``Condition.__enter__`` and the
stack kept running). Logging and ``print`` take locks too. :class:`SignalEvent` is set with a plain
attribute and one byte written to a non-blocking pipe that is never drained, so every waiter, in
any thread, wakes at once and stays woken; :func:`stop_on` installs the handlers that set it.

Here because it is the floor every process's entry point stands on (``cli`` and ``narration``).
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
from collections.abc import Iterator
from types import FrameType


class SignalEvent:
    """``threading.Event``'s ``set`` / ``is_set`` / ``wait`` without its lock: ``set`` is safe in a
    signal handler (and from any thread). It cannot be cleared: a stop, once asked, stays asked."""

    def __init__(self) -> None:
        self._set = False
        self._read, self._write = os.pipe()  # not inherited by children (PEP 446)
        os.set_blocking(self._write, False)

    def set(self) -> None:
        """Ask to stop: one attribute and one ``os.write``, nothing that takes a lock."""
        self._set = True
        write = self._write
        if write >= 0:  # closed: nobody waits any more
            # A full pipe (64 KiB of repeated signals) already wakes every waiter.
            with contextlib.suppress(BlockingIOError):
                os.write(write, b"\0")

    def is_set(self) -> bool:
        return self._set

    def wait(self, timeout: float | None = None) -> bool:
        """Until set or ``timeout`` seconds (``None``: no limit); whether it is set. A signal that
        interrupts the wait runs its handler, then the wait goes on and sees the byte (PEP 475)."""
        if self._read < 0:
            raise ValueError("wait on a closed SignalEvent")
        if not self._set:
            poller = select.poll()  # one per call: a poll object is not for two threads at once
            poller.register(self._read, select.POLLIN)
            poller.poll(None if timeout is None else max(0, round(timeout * 1000)))
        return self._set

    def close(self) -> None:
        """Close its pipe, once nothing waits on it any more (a handler left installed only sets the flag)."""
        fds = (self._read, self._write)
        self._read = self._write = -1  # first: a handler that runs meanwhile writes to no reused number
        for fd in fds:
            if fd >= 0:
                os.close(fd)

    def handle(self, signum: int, frame: FrameType | None) -> None:
        """A signal handler that sets this event."""
        self.set()


@contextlib.contextmanager
def stop_on(*signums: int) -> Iterator[SignalEvent]:
    """A :class:`SignalEvent` set by each of ``signums`` inside the ``with`` block (enter it in the main
    thread), for a command whose process ends with its stop. Leaving the block ignores them from then
    on: the stop is done, and the interpreter's exit puts back the default action of a signal with a
    Python handler (a kill), so one more SIGTERM landing there would turn a clean exit into -15."""
    event = SignalEvent()
    for signum in signums:
        signal.signal(signum, event.handle)
    try:
        yield event
    finally:
        for signum in signums:
            signal.signal(signum, signal.SIG_IGN)
        event.close()
