"""The old import path of `functions.sdk.signing`: importing it gives that very module.

Kept so code written against `functions.signing` goes on working unchanged."""

import sys

import functions.sdk.signing as _moved
from functions.sdk.signing import *  # noqa: F403  (the names type checkers see here)

sys.modules[__name__] = _moved
