"""The old import path of `functions.sdk.failures`: importing it gives that very module.

Kept so code written against `functions.failures` goes on working unchanged."""

import importlib
import sys

from functions.sdk.failures import *  # noqa: F403  (the names type checkers see here)

# The module itself, by name: `import ... as` would read its package's attribute, and
# `functions.sdk.durable.workflow` there is the decorator.
sys.modules[__name__] = importlib.import_module("functions.sdk.failures")
