"""findings/crash.py: a crash is described without the memory that ran out, and the failing frames
(with what they allocated) are released before the report is built."""
from __future__ import annotations

import gc
import weakref

from findings.crash import MAX_REASON_CHARS, MAX_TRACEBACK_CHARS, brief, describe


class Big:
    """Stands for what a check held when it ran out of memory."""


def fail_holding(error: BaseException, ref: list):
    held = Big()
    ref.append(weakref.ref(held))
    raise error


def caught(error: BaseException) -> tuple[BaseException, list]:
    ref: list = []
    try:
        fail_holding(error, ref)
    except BaseException as e:  # noqa: BLE001
        return e, ref
    raise AssertionError("did not raise")


def test_memory_error_is_brief_and_its_frames_are_released():
    error, ref = caught(MemoryError())
    gc.disable()        # only reference counting may free the frame: no help from the collector
    try:
        assert ref[0]() is not None                     # the traceback keeps the failing frame alive
        reason, text = describe(error)
        assert ref[0]() is None                         # released before anything else was built
    finally:
        gc.enable()
    assert reason == "MemoryError"
    assert "in fail_holding" in text and "full traceback not kept" in text and "memory" in text
    assert error.__traceback__ is None


def test_recursion_error_names_the_innermost_frame_without_formatting_every_one():
    def down(n):
        return down(n + 1)
    try:
        down(0)
    except RecursionError as e:
        reason, text = describe(e)
    assert reason.startswith("RecursionError: maximum recursion depth")
    assert "in down" in text and text.count("\n") < 5 and "stack" in text


def test_a_str_that_fails_still_gives_a_reason():
    class Hostile(MemoryError):
        def __str__(self):
            raise MemoryError
    error, _ = caught(Hostile())
    assert brief(error)[0] == "Hostile"
    assert describe(error)[0] == "Hostile"


def test_other_errors_keep_a_full_but_bounded_traceback():
    error, _ = caught(ValueError("x" * 10_000))
    reason, text = describe(error)
    assert reason.startswith("ValueError: xxx") and len(reason) == MAX_REASON_CHARS
    assert "Traceback (most recent call last)" in text and "fail_holding" in text
    assert len(text) <= MAX_TRACEBACK_CHARS + 10
