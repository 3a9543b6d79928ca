"""The old import path of `functions.sdk.lambda_adapter`: importing it gives that very module.

Kept so code written against `functions.lambda_adapter` goes on working unchanged."""

import sys

import functions.sdk.lambda_adapter as _moved
from functions.sdk.lambda_adapter import *  # noqa: F403  (the names type checkers see here)

sys.modules[__name__] = _moved
