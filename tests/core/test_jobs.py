"""The job system (`core.app.jobs`), Qt-free: results delivered once, on the thread that drains the mailbox, only
while the job is its key's latest; cancelling, progress, iterators and their stop hook, errors in words."""
from __future__ import annotations

import gc
import threading
import time
import weakref

import pytest

from fatstudio.core.app.jobs import Cancelled, Jobs, Mailbox, Status, describe_error


@pytest.fixture
def box():
    return Mailbox()


@pytest.fixture
def jobs(box):
    j = Jobs(box.post)
    yield j
    j.shutdown(10)


def settle(box: Mailbox, jobs: Jobs, timeout: float = 10.0) -> None:
    """Drain until every job has ended and its end has been delivered."""
    deadline = time.monotonic() + timeout
    while not jobs.idle:
        jobs.wait(0.05)
        box.drain()
        assert time.monotonic() < deadline, "the jobs did not end"
    box.drain()


def test_a_result_arrives_once_on_the_draining_thread(box, jobs):
    got = []
    jobs.submit("k", lambda x: x * 2, 21, on_result=lambda v: got.append((v, threading.current_thread())),
                on_end=lambda s: got.append(s))
    assert got == []  # nothing arrives until the owner drains
    settle(box, jobs)
    assert got == [(42, threading.main_thread()), Status.DONE]
    assert box.drain() == 0


def test_the_latest_submission_for_a_key_wins(box, jobs):
    release = threading.Event()
    got = []
    first = jobs.submit("k", lambda: release.wait(10) and "first", on_result=got.append, on_end=got.append)
    second = jobs.submit("k", lambda: "second", on_result=got.append)
    assert first.cancelled and not second.cancelled
    assert jobs.current("k") is second
    release.set()
    settle(box, jobs)
    assert got == ["second"]  # the first's result and end never arrive
    assert first.status is Status.CANCELLED and second.status is Status.DONE


def test_other_keys_run_side_by_side(box, jobs):
    both = threading.Barrier(2, timeout=10)
    got = []
    jobs.submit("a", lambda: (both.wait(), "a")[1], on_result=got.append)  # each waits for the other
    jobs.submit("b", lambda: (both.wait(), "b")[1], on_result=got.append)
    settle(box, jobs)
    assert sorted(got) == ["a", "b"]


def test_cancelling_stops_the_work_at_its_next_report_and_delivers_nothing(box, jobs):
    started, reports = threading.Event(), []
    got = []

    def work(progress):
        started.set()
        for i in range(10_000):
            reports.append(i)
            progress(i / 10_000, "working")
            time.sleep(0.001)
        return "done"

    job = jobs.submit("k", work, progress=True, on_result=got.append, on_progress=lambda f, m: got.append(m),
                      on_end=got.append)
    assert started.wait(10)
    assert jobs.cancel("k") and not jobs.busy("k")
    settle(box, jobs)
    assert got == [] and job.status is Status.CANCELLED
    assert len(reports) < 10_000  # it stopped early: its progress raised Cancelled


def test_reports_faster_than_the_owner_drains_arrive_as_the_latest_of_each_message(box, jobs):
    got = []

    def work(progress):
        for i in range(1000):
            progress(i / 1000, "reading")
        for i in range(500):
            progress(0.5 + i / 1000, "writing")
        return "done"

    jobs.submit("k", work, progress=True, on_progress=lambda f, m: got.append((f, m)), on_result=got.append)
    jobs.wait(10)
    settle(box, jobs)
    assert got == [(0.999, "reading"), (0.999, "writing"), "done"]


def test_an_iterators_items_arrive_in_order_then_its_error_then_its_end(box, jobs):
    got = []

    def items():
        yield 1
        yield 2
        raise RuntimeError("broken after two")

    jobs.submit("k", items, on_item=got.append, on_error=got.append, on_end=got.append)
    settle(box, jobs)
    assert got == [1, 2, "Unexpected error (RuntimeError): broken after two.", Status.FAILED]


def test_a_job_that_sends_partial_results_has_each_delivered(box, jobs):
    got = []

    def work(progress):
        for i in range(5):
            progress.send(i)
        return "all"

    jobs.submit("k", work, progress=True, on_item=got.append, on_result=got.append)
    settle(box, jobs)
    assert got == [0, 1, 2, 3, 4, "all"]


def test_a_cancelled_iterator_with_a_stop_hook_runs_to_its_own_end_undelivered(box, jobs):
    stop, went_on, got = threading.Event(), [], []

    def run():  # as the trainer does: stop is a request it honours, then it saves and ends
        step = 0
        while not stop.is_set():
            step += 1
            yield step
            time.sleep(0.002)
        went_on.append("saved")

    job = jobs.submit("k", run, on_item=got.append, stop=stop.set)
    deadline = time.monotonic() + 10
    while not got and time.monotonic() < deadline:
        box.drain()
    job.cancel()
    delivered = len(got)
    settle(box, jobs)
    assert stop.is_set() and went_on == ["saved"]
    assert len(got) == delivered  # nothing more arrived after the cancel


def test_a_cancelled_iterator_without_a_stop_hook_is_closed(box, jobs):
    closed, produced = threading.Event(), []

    def run():
        try:
            while True:
                produced.append(1)
                yield 1
                time.sleep(0.002)
        finally:
            closed.set()

    job = jobs.submit("k", run)
    while not produced:
        time.sleep(0.001)
    job.cancel()
    assert closed.wait(10)
    settle(box, jobs)


@pytest.mark.parametrize(("error", "words"), [
    (ValueError("the prompt is longer than ℓ_max."), "the prompt is longer than ℓ_max."),
    (FileNotFoundError(2, "No such file or directory", "/x/run"), "A file could not be read or written (/x/run): "
                                                                  "No such file or directory."),
    (MemoryError(), "Out of memory: lower the batch size, ℓ_max or d_e."),
    (KeyError("d_e"), "Unexpected error (KeyError): 'd_e'."),
])
def test_errors_reach_the_owner_in_words(box, jobs, error, words):
    def fail():
        raise error

    got = []
    jobs.submit("k", fail, on_error=got.append, on_result=got.append)
    settle(box, jobs)
    assert got == [words] == [describe_error(error)]


def test_what_a_job_ran_is_let_go_once_it_is_done(box, jobs):
    class Payload:
        pass

    payload, result = Payload(), []
    ref = weakref.ref(payload)
    jobs.submit("k", lambda p: Payload(), payload, on_result=result.append)
    del payload
    settle(box, jobs)
    assert isinstance(result[0], Payload)
    result.clear()
    gc.collect()
    assert ref() is None


def test_shutdown_cancels_every_job_waits_and_starts_none_after(box, jobs):
    stop = threading.Event()

    def run():
        while not stop.wait(0.01):
            yield 1

    jobs.submit("train", run, stop=stop.set)
    assert jobs.shutdown(10) and stop.is_set()
    late = jobs.submit("k", lambda: 1)
    assert late.cancelled and late.status is Status.CANCELLED and jobs.current("k") is None


def test_progress_raises_cancelled_after_a_cancel():
    box = Mailbox()
    jobs = Jobs(box.post)
    seen = []

    def work(progress):
        progress.send("first")
        time.sleep(0.2)
        try:
            progress(0.5, "again")
        except Cancelled:
            seen.append("cancelled")
            raise

    job = jobs.submit("k", work, progress=True)
    time.sleep(0.05)
    job.cancel()
    assert jobs.wait(10) and seen == ["cancelled"]
