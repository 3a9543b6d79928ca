"""The old import path of `functions.sdk.durable.golden`: importing it gives that very module.

Kept so code written against `functions.durable.golden` goes on working unchanged."""

import sys

import functions.sdk.durable.golden as _moved
from functions.sdk.durable.golden import *  # noqa: F403  (the names type checkers see here)

sys.modules[__name__] = _moved
