"""Lower CPU priority for work that should take only what the cores have left: a whole process (the
API's helper processes) or one thread for a while (a worker's bulk steps).

Linux's scheduler shares the cores first between *autogroups* (one per session, where
``kernel.sched_autogroup_enabled`` is on, as on most kernels outside a container's cgroup) and only
then between the threads of a group by their nice. So a niced process that stays in its parent's
session still takes its session's whole share against any other session: the API's helpers at nice 10
took half of a core from a worker's inference thread beside them (issue 34's lexicon churn). A
low-priority process therefore starts a session of its own and gives that group its nice too.

Inside one process, nice is per thread. A thread that lowered its priority may raise it back only
with ``CAP_SYS_NICE`` or a ``RLIMIT_NICE`` that allows it (``ulimits: nice: 20`` in Compose); where
neither holds, :func:`lowered_thread` leaves the thread as it is, since a thread lowered for good
would run every later task lowered too.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import logging
import os
import resource
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Final

log = logging.getLogger(__name__)

AUTOGROUP: Final = Path("/proc/self/autogroup")
AUTOGROUP_RETRY_S: Final = 1.0
"""How long a process retries its group's nice: the kernel takes one such change every 100 ms,
host-wide, and answers ``EAGAIN`` in between."""
BULK_NICENESS: Final = 19
"""How far a worker's bulk work steps back (its batcher thread, and each bulk step's task thread):
against an interactive job's threads on the same core it gets about 1.5% of it (Linux's weights,
15 against 1024), and every core nothing else wants."""
LOWEST_NICE: Final = 19
"""The kernel's lowest priority: a nice asked for past it is taken as it."""
NICE_CEILING_LIMIT: Final = 20
"""``RLIMIT_NICE`` that lets a thread come back to nice 0 (the ceiling is ``20 - limit``)."""


def lower_process_priority(niceness: int) -> None:
    """This process at ``niceness`` more than it has, against every process of the host: its own
    nice, in a session of its own whose autogroup gets the same nice (where the kernel has them).
    Signals sent to the parent's process group no longer reach it: it must watch its parent."""
    os.nice(niceness)
    if not AUTOGROUP.exists():
        return
    with contextlib.suppress(OSError):  # refused only to a process group leader, already alone
        os.setsid()
    if not _set_autogroup_nice(_lowest(os.getpriority(os.PRIO_PROCESS, 0))):
        log.warning("could not lower this process's autogroup; it keeps its session's share of the cores")


def _lowest(niceness: int) -> int:
    return min(LOWEST_NICE, niceness)


def _set_autogroup_nice(niceness: int) -> bool:
    deadline = time.monotonic() + AUTOGROUP_RETRY_S
    while True:
        try:
            AUTOGROUP.write_text(str(niceness))
            return True
        except OSError as e:
            if e.errno != errno.EAGAIN or time.monotonic() > deadline:
                return False
            time.sleep(0.02)


def lower_thread_for_good(niceness: int) -> None:
    """The calling thread at ``niceness`` more than it has, from now on: for a thread that only ever
    does low-priority work (a bulk batcher). Best effort: a refusal leaves it as it is."""
    tid = threading.get_native_id()
    with contextlib.suppress(OSError):
        os.setpriority(os.PRIO_PROCESS, tid, _lowest(os.getpriority(os.PRIO_PROCESS, tid) + niceness))


@contextlib.contextmanager
def lowered_thread(niceness: int) -> Iterator[None]:
    """The calling thread at ``niceness`` more than it has for the block, then back; nothing where
    this process may not raise a thread's priority back (see the module's docstring)."""
    if not threads_can_come_back():
        yield
        return
    tid = threading.get_native_id()
    own = os.getpriority(os.PRIO_PROCESS, tid)
    os.setpriority(os.PRIO_PROCESS, tid, _lowest(own + niceness))
    try:
        yield
    finally:
        os.setpriority(os.PRIO_PROCESS, tid, own)


@contextlib.contextmanager
def normal_thread() -> Iterator[None]:
    """The calling thread at its process's own priority for the block, then back to what it was:
    threads started in it inherit its nice, and a model's inference threads, started by a bulk step
    that loaded it, would run every later interactive call lowered."""
    tid = threading.get_native_id()
    own = os.getpriority(os.PRIO_PROCESS, tid)
    base = os.getpriority(os.PRIO_PROCESS, os.getpid())
    try:
        if own > base:
            os.setpriority(os.PRIO_PROCESS, tid, base)
    except OSError:  # a thread lowered for good, where the process may not raise it back
        own = base
    try:
        yield
    finally:
        if own > base:
            os.setpriority(os.PRIO_PROCESS, tid, own)


@functools.cache
def threads_can_come_back() -> bool:
    """Whether a thread of this process may raise its priority back after lowering it: tried once,
    on a thread of its own, after raising the soft ``RLIMIT_NICE`` as far as the hard one allows."""
    with contextlib.suppress(ValueError, OSError):
        soft, hard = resource.getrlimit(resource.RLIMIT_NICE)
        wanted = NICE_CEILING_LIMIT if hard == resource.RLIM_INFINITY else min(NICE_CEILING_LIMIT, hard)
        if soft != resource.RLIM_INFINITY and soft < wanted:
            resource.setrlimit(resource.RLIMIT_NICE, (wanted, hard))
    came_back: list[bool] = []

    def attempt() -> None:
        tid = threading.get_native_id()
        own = os.getpriority(os.PRIO_PROCESS, tid)
        try:
            os.setpriority(os.PRIO_PROCESS, tid, _lowest(own + 1))
            os.setpriority(os.PRIO_PROCESS, tid, own)
            came_back.append(os.getpriority(os.PRIO_PROCESS, tid) == own)
        except OSError:
            came_back.append(False)

    trial = threading.Thread(target=attempt, name="ttsq-nice-trial")
    trial.start()
    trial.join()
    if not came_back[0]:
        log.info("bulk steps run at normal priority: this process may not raise a thread's priority back")
    return came_back[0]
