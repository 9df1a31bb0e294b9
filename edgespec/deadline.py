"""Python code run under a deadline it cannot outlive.

A chat template is a program from the model file: `{% for %}` loops nested in
it render for minutes though the Jinja sandbox bounds each range. Threads cannot
be killed, so the deadline is checked where the template's own code runs: a
trace function sees every line of the compiled template and raises once time is
up. Native calls are not interrupted; nothing a template can reach runs long in one.
"""

from __future__ import annotations

import sys
import time
from typing import Callable, TypeVar

T = TypeVar("T")


class DeadlineExceeded(Exception):
    pass


def within(seconds: float, fn: Callable[[], T]) -> T:
    """fn(), or DeadlineExceeded once any Python line it runs starts after `seconds`."""
    deadline = time.monotonic() + seconds

    def check(frame, event, arg):
        if time.monotonic() > deadline:
            raise DeadlineExceeded(f"over {seconds:g} s")
        return check

    previous = sys.gettrace()
    sys.settrace(check)
    try:
        return fn()
    finally:
        sys.settrace(previous)
