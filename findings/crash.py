"""Describe a crash (a check, a resource build) without needing the memory that just ran out.

A check that exhausts memory raises MemoryError; one that recurses without end raises RecursionError. The
usual crash report (`traceback.format_exc()`) formats every frame with its source line, which needs memory
and stack of its own, so the handler failed and the error escaped the runner. Here the reason is
built from the exception's type, a truncated message and the innermost frame's location only, with a
constant fallback, and the traceback (which keeps the failing frames and everything they allocated alive) is
released before anything else is built. Used by the runner (llmdoctor/run/runner.py) and the check context
(checks/catalogue/inputs.py), so it lives beside Finding.
"""
from __future__ import annotations

import traceback

# errors that mean "the process ran out of something", where formatting a full traceback is unsafe
EXHAUSTION = (MemoryError, RecursionError)
MAX_REASON_CHARS = 300
MAX_TRACEBACK_CHARS = 20_000


def brief(error: BaseException) -> tuple[str, str]:
    """("Type: message" truncated, "file:line in function" of the innermost frame). Never raises."""
    try:
        name = type(error).__name__
        try:
            text = str(error)[:MAX_REASON_CHARS]
        except Exception:                 # a __str__ that itself fails or runs out of memory
            text = ""
        where, tb = "", error.__traceback__
        while tb is not None and tb.tb_next is not None:   # walks links, allocates nothing per frame
            tb = tb.tb_next
        if tb is not None:
            code = tb.tb_frame.f_code
            where = f"{code.co_filename}:{tb.tb_lineno} in {code.co_name}"
        return (f"{name}: {text}" if text else name), where
    except Exception:
        return "MemoryError" if isinstance(error, MemoryError) else "RecursionError", ""


def release(error: BaseException) -> None:
    """Drop the traceback, and with it the failing frames' locals (often the memory that ran out)."""
    try:
        error.__traceback__ = None
        error.__context__ = error.__cause__ = None
    except Exception:
        pass


def describe(error: BaseException) -> tuple[str, str]:
    """(reason, traceback text) for a crash report. Exhaustion errors get a brief description built first and
    their traceback released; other errors the usual formatted traceback (truncated), falling back to the
    brief form when formatting itself runs out of memory or stack."""
    if isinstance(error, EXHAUSTION):
        reason, where = brief(error)
        release(error)
        return reason, f"{reason}\n  at {where}\n(full traceback not kept: the process was out of " \
                       f"{'memory' if isinstance(error, MemoryError) else 'stack'})"
    try:
        reason = f"{type(error).__name__}: {error}"[:MAX_REASON_CHARS]
        text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
        if len(text) > MAX_TRACEBACK_CHARS:
            text = text[:MAX_TRACEBACK_CHARS // 2] + "\n...\n" + text[-MAX_TRACEBACK_CHARS // 2:]
        return reason, text
    except EXHAUSTION:
        reason, where = brief(error)
        release(error)
        return reason, f"{reason}\n  at {where}\n(formatting the full traceback failed)"
