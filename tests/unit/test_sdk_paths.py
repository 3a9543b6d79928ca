"""The SDK lives in the `functions.sdk` package; every import path users had before it
was one keeps working, and names the very same objects (module state included)."""

from __future__ import annotations

import importlib
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import functions.durable
import functions.sdk
import functions.sdk.durable

ROOT = Path(__file__).resolve().parents[2]

# Each old module and the module it now is.
MOVED = {
    "functions.protocol": "functions.sdk.protocol",
    "functions.signing": "functions.sdk.signing",
    "functions.serving": "functions.sdk.serving",
    "functions.failures": "functions.sdk.failures",
    "functions.lambda_adapter": "functions.sdk.lambda_adapter",
    **{f"functions.durable.{name}": f"functions.sdk.durable.{name}"
       for name in ("call", "context", "durations", "errors", "golden", "parallel", "steps",
                    "stream", "stubs", "workflow")},
}


def fresh(code: str) -> str:
    """Run `code` in a new interpreter (import order matters to what is checked); its
    output."""
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_module_path_is_the_moved_module_itself(old: str) -> None:
    assert importlib.import_module(old) is importlib.import_module(MOVED[old])


def test_the_sdk_package_serves_every_public_name() -> None:
    assert sorted(functions.sdk.__all__) == [
        "FunctionApp", "RetryableError", "StepRequest", "TerminalError", "serve"]
    from functions.sdk.app import FunctionApp
    from functions.sdk.failures import RetryableError, TerminalError
    from functions.sdk.request import StepRequest
    from functions.sdk.serving import serve

    assert functions.sdk.FunctionApp is FunctionApp
    assert functions.sdk.StepRequest is StepRequest
    assert functions.sdk.serve is serve
    assert functions.sdk.TerminalError is TerminalError
    assert functions.sdk.RetryableError is RetryableError
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        _ = functions.sdk.Nope


def test_functions_durable_names_the_same_objects_as_the_package() -> None:
    assert functions.durable.__all__ == functions.sdk.durable.__all__
    for name in functions.durable.__all__:
        assert getattr(functions.durable, name) is getattr(functions.sdk.durable, name), name


def test_workflow_stays_the_decorator_whatever_is_imported_first() -> None:
    # Importing the submodule `functions.durable.workflow` binds it on its package, as
    # the import system does; the package must still give the decorator.
    out = fresh("""
        import functions.durable.workflow
        from functions.durable import workflow
        from functions.durable.workflow import Workflow
        print(callable(workflow) and not isinstance(workflow, type(functions)),
              Workflow.__module__)
    """)
    assert out.split() == ["True", "functions.sdk.durable.workflow"]


def test_the_lambda_handler_string_of_the_template_still_resolves() -> None:
    out = fresh("""
        import importlib
        import functions.sdk.lambda_adapter as real
        module, _, name = "functions.lambda_adapter.handler".rpartition(".")
        print(getattr(importlib.import_module(module), name) is real.handler)
    """)
    assert out.split() == ["True"]


def test_the_wire_format_loads_without_starlette_or_uvicorn() -> None:
    # The worker imports the protocol and signing; the app and its server load on use.
    out = fresh("""
        import sys
        import functions.protocol, functions.signing
        print(sorted({m.split(".")[0] for m in sys.modules} & {"starlette", "uvicorn"}))
        from functions.sdk import FunctionApp, serve
        print(sorted({m.split(".")[0] for m in sys.modules} & {"starlette", "uvicorn"}))
    """)
    assert out.splitlines() == ["[]", "['starlette', 'uvicorn']"]
