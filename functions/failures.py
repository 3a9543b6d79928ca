"""The old import path of `functions.sdk.failures`: importing it gives that very module.

Kept so code written against `functions.failures` goes on working unchanged."""

import sys

import functions.sdk.failures as _moved
from functions.sdk.failures import *  # noqa: F403  (the names type checkers see here)

sys.modules[__name__] = _moved
