"""The old import path of `functions.sdk.protocol`: importing it gives that very module.

Kept so code written against `functions.protocol` goes on working unchanged."""

import sys

import functions.sdk.protocol as _moved
from functions.sdk.protocol import *  # noqa: F403  (the names type checkers see here)

sys.modules[__name__] = _moved
