"""The Lambda zip (infra/deploy.py) holds orchestrator/, functions/ and LAMBDA_REQUIREMENTS
with what they require; the runtime brings boto3. Every third-party package the deployed
handlers import (the API with its dashboard and /metrics, the worker, the sweeper) must be
among them: a missing one fails the function at its first import, on AWS only."""

from __future__ import annotations

import re
import subprocess
import sys
from importlib import metadata

from infra.deploy import LAMBDA_REQUIREMENTS

# What the Lambda Python runtime provides, with what they require.
RUNTIME = ("boto3",)
# Imported only where installed (each import in a try): the handlers are imported here
# with these refused, which proves it. httpx's command line (click, rich, pygments),
# sse-starlette's look for a uvicorn server, the optional traces (the `otel` extra).
# Modules the interpreter loaded before the handlers (a pip-made venv's setuptools hook,
# `_distutils_hack`, from its .pth file) are not the handlers' imports.
OPTIONAL = ("click", "rich", "pygments", "uvicorn", "opentelemetry")
IMPORTS = """
import sys
from importlib.abc import MetaPathFinder

started = set(sys.modules)

class Refuse(MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in %r:
            raise ModuleNotFoundError(name)
        return None

sys.meta_path.insert(0, Refuse())
import orchestrator.lambda_handlers
from orchestrator.api.app import create_app
from orchestrator.runtime import Runtime
from orchestrator.sweeper import Sweeper
from orchestrator.worker import Worker
print("\\n".join(sorted({m.split(".")[0] for m in set(sys.modules) - started})))
"""


def _name(requirement: str) -> str:
    return re.split(r"[\s;\[<>=!~(]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def _closure(names: tuple[str, ...]) -> set[str]:
    """`names` and every distribution they require (extras and markers aside: more is
    fine here, the question is what is missing)."""
    seen: set[str] = set()
    todo = [_name(n) for n in names]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        todo += [_name(r) for r in requires if "extra ==" not in r]
    return seen


def test_the_lambda_zip_takes_every_package_the_handlers_import() -> None:
    done = subprocess.run([sys.executable, "-c", IMPORTS % (OPTIONAL,)], capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout.split()
    owners = metadata.packages_distributions()
    imported = {_name(d) for module in out for d in owners.get(module, [])}
    ours = {"orchestrator", "functions", "infra"}
    shipped = _closure(LAMBDA_REQUIREMENTS + RUNTIME) | ours
    missing = sorted(imported - shipped)
    assert not missing, f"the handlers import {missing}, which LAMBDA_REQUIREMENTS lacks"
