"""Python's cyclic collector runs in the GUI thread only (fatstudio.qt.gc)."""
import gc
import threading

import pytest

pytest.importorskip("PySide6")

from fatstudio.qt import gc as gc_module
from fatstudio.qt.gc import MainThreadCollector, collect_due, release_free_memory


def test_collection_happens_on_the_gui_threads_timer(qtbot):
    collector = MainThreadCollector(interval_ms=10)
    try:
        assert not gc.isenabled()
        threads = []
        gc.callbacks.append(lambda phase, info: phase == "start" and threads.append(threading.current_thread()))
        try:
            kept: list = []  # alive until collected: the count of containers stays past gen-0's threshold
            worker = threading.Thread(target=lambda: kept.extend([object()] for _ in range(10 * gc.get_threshold()[0])))
            worker.start()
            worker.join()
            qtbot.waitUntil(lambda: bool(threads), timeout=5000)
        finally:
            gc.callbacks.pop()
        assert set(threads) == {threading.main_thread()}
    finally:
        collector.timer.stop()


def test_collect_due_collects_the_oldest_generation_past_its_threshold():
    gc.collect()
    before = gc.get_stats()[1]["collections"]
    collect_due()  # nothing is due right after a full collection
    assert gc.get_stats()[1]["collections"] == before
    t0, _, _ = gc.get_threshold()
    keep = [[i] for i in range(t0 + 10)]  # containers count towards generation 0
    collect_due()
    assert gc.get_count()[0] < t0 and keep


def _rss() -> int:
    import os

    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(gc_module._TRIM is None, reason="malloc_trim is glibc's (Linux)")
def test_release_free_memory_gives_back_what_a_worker_thread_freed():
    kept = []

    def work():  # ~100 MB through malloc in the thread's own arena, all freed but the last block
        blocks = [bytes(4096) for _ in range(25_000)]
        kept.append(blocks[-1])

    t = threading.Thread(target=work)
    t.start()
    t.join()
    before = _rss()
    assert release_free_memory()
    assert before - _rss() > 50e6


def test_the_collector_trims_on_its_own_timer_unless_told_never(qtbot, monkeypatch):
    calls: list[int] = []
    monkeypatch.setattr(gc_module, "_TRIM", lambda pad: calls.append(pad))  # wherever it runs, glibc or not
    never = MainThreadCollector(trim_interval_ms=0)
    often = MainThreadCollector(trim_interval_ms=10)
    try:
        assert not never.trim_timer.isActive()
        qtbot.waitUntil(lambda: len(calls) >= 3, timeout=5000)
        assert set(calls) == {0}  # malloc_trim(0): keep no padding
    finally:
        for c in (never, often):
            c.timer.stop()
            c.trim_timer.stop()
