"""The old import path of `functions.sdk.durable.stream`: importing it gives that very module.

Kept so code written against `functions.durable.stream` goes on working unchanged."""

import sys

import functions.sdk.durable.stream as _moved
from functions.sdk.durable.stream import *  # noqa: F403  (the names type checkers see here)

sys.modules[__name__] = _moved
