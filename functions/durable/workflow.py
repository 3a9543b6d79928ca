"""The old import path of `functions.sdk.durable.workflow`: importing it gives that very module.

Kept so code written against `functions.durable.workflow` goes on working unchanged."""

import sys

import functions.sdk.durable.workflow as _moved
from functions.sdk.durable.workflow import *  # noqa: F403  (the names type checkers see here)

sys.modules[__name__] = _moved
