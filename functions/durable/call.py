"""The old import path of `functions.sdk.durable.call`: importing it gives that very module.

Kept so code written against `functions.durable.call` goes on working unchanged."""

import sys

import functions.sdk.durable.call as _moved
from functions.sdk.durable.call import *  # noqa: F403  (the names type checkers see here)

sys.modules[__name__] = _moved
