"""The old import path of `functions.sdk.serving`: importing it gives that very module.

Kept so code written against `functions.serving` goes on working unchanged."""

import sys

import functions.sdk.serving as _moved
from functions.sdk.serving import *  # noqa: F403  (the names type checkers see here)

sys.modules[__name__] = _moved
