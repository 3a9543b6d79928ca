"""The old import path of `functions.sdk.durable.parallel`: importing it gives that very module.

Kept so code written against `functions.durable.parallel` goes on working unchanged."""

import sys

import functions.sdk.durable.parallel as _moved
from functions.sdk.durable.parallel import *  # noqa: F403  (the names type checkers see here)

sys.modules[__name__] = _moved
