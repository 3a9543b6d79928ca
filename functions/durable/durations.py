"""The old import path of `functions.sdk.durable.durations`: importing it gives that very module.

Kept so code written against `functions.durable.durations` goes on working unchanged."""

import sys

import functions.sdk.durable.durations as _moved
from functions.sdk.durable.durations import *  # noqa: F403  (the names type checkers see here)

sys.modules[__name__] = _moved
