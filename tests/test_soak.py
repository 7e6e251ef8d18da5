"""The chaos soak's own parts that need no stack (``bench/soak``): the seeded fault schedule and the
end checks on plain data, each shown able to fail. The soak itself runs under ``make soak``."""

from __future__ import annotations

import itertools

import pytest

from bench.soak.checks import (
    BatchEnd,
    Check,
    Delivery,
    batch_checks,
    client_checks,
    job_checks,
    latency_split,
    leftover_checks,
    object_checks,
    percentile,
    recovery_check,
    webhook_checks,
)
from bench.soak.outages import bound_checks, clear_from, net_of_outages, recovery_after_outages
from bench.soak.receivers import parse_line
from bench.soak.schedule import RECEIVERS, TARGET_GROUPS, FaultKind, fault_schedule, parse_range


def failing(checks: list[Check]) -> set[str]:
    return {check.name for check in checks if not check.passed}


@pytest.mark.parametrize("seed", [1, 2, 3, 42, 1234])
def test_the_schedule_keeps_its_bounds(seed: int) -> None:
    faults = fault_schedule(seed, 3600)
    starts = [f.at_s for f in faults]
    assert 45 <= starts[0] <= 90
    assert all(45 - 0.1 <= b - a <= 90 + 0.1 for a, b in itertools.pairwise(starts))
    assert starts[-1] < 3600
    for fault in faults:
        if fault.kind is FaultKind.KILL:
            assert fault.duration_s == 0
        else:
            assert 30 <= fault.duration_s <= 180
        assert (fault.kind is FaultKind.DROP) == (fault.target in RECEIVERS)
    for fault in faults:  # never two faults on one target at once
        overlapping = [f for f in faults if f is not fault and f.target == fault.target]
        assert all(not (f.at_s <= fault.at_s < f.ends_s) for f in overlapping)


def test_the_same_seed_gives_the_same_faults_and_every_target_is_hit() -> None:
    assert fault_schedule(7, 1800) == fault_schedule(7, 1800)
    assert fault_schedule(7, 1800) != fault_schedule(8, 1800)
    hit = {f.target for f in fault_schedule(7, 36_000)}
    assert hit == {target for group in TARGET_GROUPS for target in group}
    assert {f.kind for f in fault_schedule(7, 36_000)} == set(FaultKind)


def test_a_trial_schedule_and_a_bad_range() -> None:
    faults = fault_schedule(5, 240, parse_range("20-40"))
    assert len(faults) >= 5
    with pytest.raises(ValueError, match="like 45-90"):
        parse_range("90-45")
    with pytest.raises(ValueError, match="like 45-90"):
        parse_range("fast")


def test_job_checks_find_lost_unfinished_stuck_and_failed() -> None:
    accepted = {"a": "interactive", "b": "bulk", "c": "batch", "h": "hostile"}
    good = job_checks(
        accepted, {"a": "succeeded", "b": "succeeded", "c": "succeeded", "h": "failed"}, {"a": "succeeded"}
    )
    assert failing(good) == set()
    bad = job_checks(
        accepted,
        {"a": None, "b": "running", "c": "failed", "h": "failed"},
        {"b": "running", "x": "queued", "c": "failed"},
    )
    assert failing(bad) == {"accepted jobs terminal", "0 lost", "0 stuck", "ordinary jobs succeeded"}


def test_object_checks_find_missing_doubled_stray_and_wrong_lengths() -> None:
    statuses = {"a": "succeeded", "b": "succeeded", "c": "failed"}
    good = object_checks(statuses, {"a": 1, "b": 1}, {"a": (2.0, 2.01), "b": (100.0, 100.5)})
    assert failing(good) == set()
    bad = object_checks(statuses, {"b": 2, "c": 1}, {"a": (2.0, None), "b": (2.0, 2.5)})
    assert failing(bad) == {
        "succeeded objects exist",
        "0 duplicated objects",
        "no objects of other jobs",
        "objects decode to their duration",
    }


def test_webhook_checks_allow_repeats_of_one_id_only() -> None:
    expected = {"a": "job.succeeded", "B": "batch.completed"}
    states = {"a": "delivered", "B": "delivered"}
    repeated = [
        Delivery("msg_a_succeeded", "job.succeeded", "a", True),
        Delivery("msg_a_succeeded", "job.succeeded", "a", True),
        Delivery("msg_B_batch_completed", "batch.completed", "B", True),
    ]
    checks = webhook_checks(expected, repeated, states)
    assert failing(checks) == set()
    assert "1 repeated deliveries" in next(c.detail for c in checks if c.name == "one webhook-id per event")
    bad = [
        Delivery("msg_a_succeeded", "job.succeeded", "a", True),
        Delivery("msg_a_other", "job.succeeded", "a", False),
        Delivery("msg_x", "job.failed", "x", True),
    ]
    assert failing(webhook_checks(expected, bad, {"a": "pending"})) == {
        "each webhook event delivered",
        "one webhook-id per event",
        "webhook signatures verify",
        "no unexpected webhook events",
        "webhook state delivered",
    }


def test_batch_leftover_client_and_recovery_checks_can_fail() -> None:
    assert failing(batch_checks({"b": BatchEnd("completed", 10, 10, 1)})) == set()
    assert failing(batch_checks({"b": BatchEnd("completed", 10, 10, 2)})) == {"batches completed with one manifest"}
    assert failing(batch_checks({"b": BatchEnd("running", 10, 9, 0)})) == {"batches completed with one manifest"}
    assert failing(leftover_checks([], {"api": True}, [])) == set()
    assert failing(leftover_checks(["tmp/x"], {"api": False}, ["soak: beat killed by SIGSEGV"])) == {
        "no tmp/ parts left",
        "every process alive",
        "no process died unasked",
    }
    assert failing(client_checks([], [], {"w": True})) == set()
    assert failing(client_checks(["bulk: 500 internal_error"], ["interactive k"], {"w": False})) == {
        "no unexpected answers",
        "every submit answered",
        "watchers saw the end",
    }
    assert recovery_check({"kill api": 3.0}).passed
    assert not recovery_check({"kill api": 3.0, "stop redis": None}).passed


def test_latency_is_split_by_the_fault_windows() -> None:
    latencies = [(10.0, 1.0), (12.0, 30.0), (20.0, 9.0), (25.0, 7.0), (40.0, 2.0)]
    split = latency_split(latencies, [(15.0, 30.0)])
    assert split["during_faults"] == {"jobs": 3, "p50_s": 9.0, "p99_s": 30.0}  # submitted before, finished after
    assert split["between_faults"] == {"jobs": 2, "p50_s": 1.0, "p99_s": 2.0}
    assert percentile([], 99) is None
    assert percentile([float(i) for i in range(1, 101)], 99) == 99.0


def test_recovery_counts_from_the_end_of_the_outages_still_on() -> None:
    outages = [(100.0, 270.0), (260.0, 300.0), (400.0, 450.0)]
    assert clear_from(50.0, outages) == 50.0  # none on: its own end
    assert clear_from(200.0, outages) == 300.0  # the one on, and the one on at that one's end
    assert clear_from(350.0, outages) == 350.0  # a later outage is not waited for
    assert recovery_after_outages(200.0, 314.7, outages) == 14.7
    assert recovery_after_outages(50.0, 52.5, outages) == 2.5
    assert recovery_after_outages(200.0, 290.0, outages) == 0.0  # a receiver's, recovered before


def test_latency_net_of_outages_leaves_out_only_the_time_inside_them() -> None:
    outages = [(10.0, 20.0), (15.0, 25.0), (40.0, 50.0)]
    assert net_of_outages(0.0, 5.0, outages) == 5.0
    assert net_of_outages(5.0, 30.0, outages) == 15.0  # 15 s inside the two overlapping ones
    assert net_of_outages(45.0, 10.0, outages) == 5.0


def test_issue_35_bounds_can_fail() -> None:
    assert failing(bound_checks([0.5, 2.0, 3.0], 12.0)) == set()
    assert failing(bound_checks([0.5, 31.0, 3.0], 12.0)) == {"no recovery over 30 s"}
    assert failing(bound_checks([0.5, 2.0, None], 12.0)) == {"no recovery over 30 s"}
    assert failing(bound_checks([6.0, 7.0, 1.0], 12.0)) == {"median recovery at most 5 s"}
    assert failing(bound_checks([1.0], 30.5)) == {"interactive p99 during faults at most 30 s"}


def test_a_receiver_line_is_read_back() -> None:
    line = "job.succeeded job=770d status=succeeded webhook-id=msg_770d_succeeded verified"
    assert parse_line(line) == Delivery("msg_770d_succeeded", "job.succeeded", "770d", True)
    rejected = parse_line("job.failed job=1 status=failed webhook-id=msg_1_failed REJECTED: no signature")
    assert rejected is not None
    assert not rejected.verified
    assert parse_line("unreadable body webhook-id=None REJECTED") is None
