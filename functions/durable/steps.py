"""The old import path of `functions.sdk.durable.steps`: importing it gives that very module.

Kept so code written against `functions.durable.steps` goes on working unchanged."""

import sys

import functions.sdk.durable.steps as _moved
from functions.sdk.durable.steps import *  # noqa: F403  (the names type checkers see here)

sys.modules[__name__] = _moved
