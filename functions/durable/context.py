"""The old import path of `functions.sdk.durable.context`: importing it gives that very module.

Kept so code written against `functions.durable.context` goes on working unchanged."""

import sys

import functions.sdk.durable.context as _moved
from functions.sdk.durable.context import *  # noqa: F403  (the names type checkers see here)

sys.modules[__name__] = _moved
