"""The Prompt panel's worker protocol: a job is an iterator of the core's typed prompt events
(`core.inspect.prompt_events`), run in a worker thread by `guarded`, which tags each event with its run and
turns any exception into `Failed` in words, so the user never sees a traceback."""
from __future__ import annotations

from collections.abc import Generator, Iterable
from dataclasses import dataclass

from ..core.inference.prompt_events import Failed, Finished, PromptEvent
from .workers import describe_error


@dataclass(frozen=True)
class Done:
    """A run's worker is done: nothing more comes from it."""


@dataclass(frozen=True)
class RunEvent:
    """An event of run ``run_id`` (the panel ignores those of a run it has since replaced)."""

    run_id: int
    event: PromptEvent | Done


def guarded(job: Iterable[PromptEvent], run_id: int) -> Generator[RunEvent, None, None]:
    """``job``'s events tagged with ``run_id``; an exception ends it with `Failed` and a "failed" `Finished`;
    `Done` last."""
    try:
        for event in job:
            yield RunEvent(run_id, event)
    except Exception as e:
        yield RunEvent(run_id, Failed(describe_error(e)))
        yield RunEvent(run_id, Finished("failed"))
    yield RunEvent(run_id, Done())
