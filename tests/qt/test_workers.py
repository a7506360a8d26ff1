"""A call in a worker thread (fatstudio.qt.workers) lets go of what it ran once it is done."""
import gc
import os
import subprocess
import sys
import weakref

import pytest

pytest.importorskip("PySide6")

from fatstudio.qt.workers import call_in_thread, wait_for_workers

N = 12  # PySide keeps about half of the runnables it ran: all 12 payloads freed by chance is ~1 in 4000


class Payload:
    """Stands for what a call holds: a model's weights, a corpus."""


def test_a_calls_arguments_and_result_are_freed_once_it_is_done(qtbot):
    # PySide kept the runnables when the machine was busy (as while training): keep every core busy meanwhile
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range((os.cpu_count() or 1) + 1)]
    try:
        _run_calls(qtbot)
    finally:
        for p in busy:
            p.kill()
            p.wait()


def _run_calls(qtbot):
    refs, results = [], []
    for i in range(1, N + 1):
        payload = Payload()
        refs.append(weakref.ref(payload))
        call_in_thread(lambda p: Payload(), payload, on_result=results.append)
        del payload
        qtbot.waitUntil(lambda i=i: len(results) == i, timeout=10_000)  # one at a time, as a session's
    assert wait_for_workers(10_000)
    qtbot.wait(20)  # the workers' queued finished signals
    assert all(isinstance(r, Payload) for r in results)
    results.clear()
    gc.collect()
    assert [r() for r in refs] == [None] * N


def test_a_call_held_by_its_own_receiver_is_freed_once_done(qtbot):
    # a receiver that keeps the call (to check that its result is still wanted) makes a cycle through a
    # connection, which the garbage collector cannot see: the call disconnects its receivers once done
    results, refs = [], []
    for _ in range(N):
        call = call_in_thread(lambda: Payload())
        call.result.connect(lambda value, c=call: results.append((c, value)))
        call.done.connect(lambda c=call: refs.append(weakref.ref(c)))
        del call
    qtbot.waitUntil(lambda: len(refs) == N, timeout=10_000)
    assert [type(v) for _, v in results] == [Payload] * N
    results.clear()
    gc.collect()
    assert [r() for r in refs] == [None] * N


def test_reports_queued_for_a_deleted_owner_or_a_cancelled_call_never_arrive(qtbot):
    """A widget closed and deleted while its call's reports are still queued gets none of them (they reached a
    deleted widget: 'Internal C++ object already deleted'); a cancelled call's queued progress is dropped too."""
    from PySide6.QtCore import QCoreApplication, QEvent
    from PySide6.QtWidgets import QWidget

    def work(progress):
        progress(0.5, "half")
        return 42

    got = []
    owner = QWidget()
    call_in_thread(work, with_progress=True, owner=owner, on_result=got.append,
                   on_progress=lambda f, m: got.append((f, m)))
    assert wait_for_workers(10_000)  # both reports are queued now, not yet delivered
    owner.deleteLater()
    QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
    qtbot.wait(50)
    assert got == []

    cancelled = call_in_thread(work, with_progress=True, on_progress=lambda f, m: got.append((f, m)))
    assert wait_for_workers(10_000)
    cancelled.cancel()
    qtbot.wait(50)
    assert got == []
