"""The old import path of `functions.sdk.durable.stubs`: importing it gives that very module.

Kept so code written against `functions.durable.stubs` goes on working unchanged."""

import sys

import functions.sdk.durable.stubs as _moved
from functions.sdk.durable.stubs import *  # noqa: F403  (the names type checkers see here)

sys.modules[__name__] = _moved
