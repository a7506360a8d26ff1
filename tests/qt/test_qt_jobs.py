"""The job system's Qt side (`qt.jobs`): what a job hands back runs on the GUI thread, through one mailbox made in the
GUI thread; no Qt object is made for a job, so none is ever destroyed in a job's thread (the superqt workers' signal
objects were, with their runnables, in the pool's threads: now and then a segmentation fault in the event loop)."""
from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap
import threading

from PySide6.QtCore import QObject
from PySide6.QtWidgets import QWidget

from fatstudio.core.app.jobs import Status
from fatstudio.qt.jobs import new_jobs

LONG = 60_000


def test_everything_a_job_hands_back_arrives_on_the_gui_thread(qtbot):
    jobs = new_jobs()
    seen = []

    def work(progress):
        progress(0.5, "half")
        progress.send("part")
        yield "item"
        return "done"

    def where(what):
        return lambda *a: seen.append((what, threading.current_thread() is threading.main_thread()))

    jobs.submit("k", work, progress=True, on_progress=where("progress"), on_item=where("item"),
                on_result=where("result"), on_end=where("end"))
    qtbot.waitUntil(lambda: jobs.idle, timeout=LONG)
    assert {w for w, _ in seen} == {"progress", "item", "result", "end"}
    assert all(main for _, main in seen)
    jobs.shutdown()


def test_a_result_for_a_widget_deleted_meanwhile_is_dropped(qtbot):
    jobs = new_jobs()
    release, got = threading.Event(), []

    class Receiver(QWidget):
        def take(self, value):
            got.append(value)

    receiver = Receiver()
    jobs.submit("k", lambda: release.wait(10) and "late", on_result=receiver.take)
    receiver.deleteLater()
    qtbot.waitUntil(lambda: not _alive(receiver), timeout=LONG)
    release.set()
    qtbot.waitUntil(lambda: jobs.idle, timeout=LONG)
    assert got == []
    jobs.shutdown()


def _alive(obj: QObject) -> bool:
    import shiboken6
    return shiboken6.isValid(obj)


def test_jobs_make_no_qt_objects(qtbot):
    """A thousand jobs later there are as many QObjects as before: a job's thread has none to destroy."""
    jobs = new_jobs()
    gc.collect()
    before = sum(issubclass(type(o), QObject) for o in gc.get_objects())
    results = []
    for i in range(1000):
        jobs.submit(f"k{i % 7}", lambda i=i: i, on_result=results.append)
    qtbot.waitUntil(lambda: jobs.idle, timeout=LONG)
    gc.collect()
    assert sum(issubclass(type(o), QObject) for o in gc.get_objects()) <= before
    jobs.shutdown()


def test_a_qt_object_a_job_holds_last_is_destroyed_on_the_gui_thread(qtbot):
    """The kind of fault behind the crash (issue 33): a QObject that lives in the GUI thread destroyed in another
    thread, while the GUI thread may be using it. superqt's workers did it to their signal objects (their runnables'
    last reference dropped in the pool's threads: 5 of 200 calls in a run on this machine). A job that holds the last
    reference to a widget, as its argument or through a callback bound to it, hands it back when it ends: the widget
    is destroyed on the GUI thread."""
    from PySide6.QtCore import Qt

    class Receiver(QWidget):
        def take(self, value):
            pass

    jobs = new_jobs()
    where = []
    for i in range(40):
        widget = Receiver()  # no parent: destroyed with its last Python reference
        widget.destroyed.connect(lambda *_: where.append(threading.current_thread() is threading.main_thread()),
                                 Qt.ConnectionType.DirectConnection)
        release = threading.Event()
        if i % 2:
            jobs.submit(f"k{i}", lambda w, ev: ev.wait(10), widget, release)  # held as the job's argument
        else:
            jobs.submit(f"k{i}", lambda ev: ev.wait(10), release, on_result=widget.take)  # through its callback
        del widget  # the GUI's reference goes first
        release.set()
    qtbot.waitUntil(lambda: jobs.idle, timeout=LONG)
    gc.collect()
    assert len(where) == 40 and all(where)
    jobs.shutdown()


STRESS = textwrap.dedent("""
    import faulthandler, gc, os, sys
    faulthandler.enable(all_threads=True)
    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication, QWidget
    from fatstudio.qt.jobs import new_jobs, shutdown

    app = QApplication([])
    gc.enable(); gc.set_threshold(50, 5, 5)  # collections run in whichever thread allocates: the jobs' too
    jobs = new_jobs()
    N, made, got, owners = 3000, [0], [0], []

    class Cycle:  # a widget held in a reference cycle: freed by whichever thread collects
        def __init__(self):
            self.me, self.widget = self, QWidget()

    class Receiver(QWidget):
        def take(self, value):
            got[0] += 1

    def work(i, progress):
        junk = [[j] for j in range(200)]
        for k in range(3):
            progress(k / 3, "step")
            progress.send(k)
        return i

    def tick():
        for _ in range(8):
            i = made[0]
            receiver = Receiver()
            owners.append(receiver)
            Cycle()
            jobs.submit(f"k{i % 5}", work, i, progress=True, on_result=receiver.take, on_item=lambda k: None,
                        on_progress=lambda f, m: None)
            made[0] += 1
        while len(owners) > 6:
            owners.pop(0).deleteLater()  # receivers go while their jobs run
        if made[0] >= N:
            timer.stop()
            QTimer.singleShot(500, app.quit)

    timer = QTimer(interval=0, timeout=tick)
    timer.start()
    app.exec()
    assert shutdown(60)
    print("made", made[0], "delivered", got[0])
""")


def test_a_storm_of_jobs_with_receivers_deleted_and_collections_in_job_threads_ends_cleanly(tmp_path):
    """Three thousand jobs reporting progress and items, their receivers deleted while they run, the collector
    running in the jobs' threads: the process ends with exit 0 (a crash would kill it with a signal)."""
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen"}
    out = subprocess.run([sys.executable, "-c", STRESS], capture_output=True, text=True, env=env, timeout=600,
                         cwd=tmp_path)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-4000:]
    made, delivered = (int(w) for w in out.stdout.split()[1::2])
    assert made == 3000 and 0 < delivered <= made


def test_a_training_jobs_stop_hook_runs_when_the_window_quits(qtbot):
    jobs = new_jobs()
    stop, ended = threading.Event(), []

    def run():
        while not stop.wait(0.01):
            yield 1
        ended.append("saved")

    job = jobs.submit("training", run, stop=stop.set)
    assert jobs.shutdown(10)
    assert stop.is_set() and ended == ["saved"] and job.status in (Status.RUNNING, Status.CANCELLED)
