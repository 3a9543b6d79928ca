"""The old import path of `functions.sdk.durable.errors`: importing it gives that very module.

Kept so code written against `functions.durable.errors` goes on working unchanged."""

import sys

import functions.sdk.durable.errors as _moved
from functions.sdk.durable.errors import *  # noqa: F403  (the names type checkers see here)

sys.modules[__name__] = _moved
