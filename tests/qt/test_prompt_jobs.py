"""The Prompt panel's worker protocol: `guarded` tags events with their run and ends every job with `Done`,
an exception turned into `Failed` in words and a "failed" `Finished`."""
from fatstudio.core.inference.prompt_events import Failed, Finished, Tokens
from fatstudio.qt.prompt_jobs import Done, RunEvent, guarded


def test_guarded_tags_events_and_turns_an_error_into_words():
    def job():
        yield Tokens([])
        raise ValueError("the prompt is too long")

    assert list(guarded(job(), 7)) == [RunEvent(7, Tokens([])), RunEvent(7, Failed("the prompt is too long")),
                                       RunEvent(7, Finished("failed")), RunEvent(7, Done())]
    assert list(guarded(iter([Finished("finished")]), 2)) == [RunEvent(2, Finished("finished")), RunEvent(2, Done())]
