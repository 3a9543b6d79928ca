"""Each module of the SDK has one import path, under `functions.sdk`. The one other path is
the documented `functions.durable`: the names of `functions.sdk.durable`, the very same
objects. The modules' paths from before the SDK was a package (shims that re-exported it)
are gone: none may come back, and nothing of ours may import one."""

from __future__ import annotations

import ast
import importlib.util
import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

import functions.durable
import functions.sdk
import functions.sdk.durable

ROOT = Path(__file__).resolve().parents[2]

# The paths removed, each the old name of the module of the same name under functions.sdk.
REMOVED = (
    *(f"functions.{name}" for name in
      ("failures", "lambda_adapter", "protocol", "serving", "signing")),
    *(f"functions.durable.{name}" for name in
      ("call", "context", "durations", "errors", "golden", "parallel", "steps", "stream",
       "stubs", "workflow")),
)
# The names a package exports that are also the names of removed modules.
EXPORTED = {"functions.durable": frozenset(functions.durable.__all__)}
# Where our Python code is, and the other files that name modules (handlers, docs, CI).
CODE = ("orchestrator", "functions", "infra", "tests", ".ci")
TEXTS = ("README.md", "functions/README.md", "orchestrator/README.md", "infra/README.md",
         "template.yaml", "orchestrator.yml", "pyproject.toml", ".ci/run")


def fresh(code: str) -> str:
    """Run `code` in a new interpreter (import order matters to what is checked); its
    output."""
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def removed(name: str) -> bool:
    return any(name == old or name.startswith(old + ".") for old in REMOVED)


def sources() -> Iterator[Path]:
    for top in CODE:
        yield from (p for p in sorted((ROOT / top).rglob("*.py")) if "__pycache__" not in p.parts)


def imported(path: Path, tree: ast.Module) -> Iterator[tuple[int, str]]:
    """Each module an import statement of `path` names, by line: `from a import b` names
    `a` and `a.b` (b may be a submodule, unless `a` exports a `b`), a relative import is
    resolved against the file's package, and `importlib.import_module("a")` names `a`."""
    # The package a relative import starts from: the file's folder (an __init__'s too).
    package = list(path.relative_to(ROOT).parent.parts)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            yield node.lineno, module
            for alias in node.names:
                # `from functions.durable import workflow` is the decorator, not the module.
                if alias.name not in EXPORTED.get(module, ()):
                    yield node.lineno, f"{module}.{alias.name}"
        elif (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
              and ast.unparse(node.func).rpartition(".")[2] in ("import_module", "__import__")):
            yield node.lineno, str(node.args[0].value)


@pytest.mark.parametrize("old", REMOVED)
def test_a_removed_path_imports_nothing(old: str) -> None:
    assert importlib.util.find_spec(old) is None, f"{old} is back: import functions.sdk's"


def test_functions_holds_the_sdk_the_examples_and_the_documented_durable_path() -> None:
    # A new module here would be a second path to an SDK module: it belongs in sdk/.
    def listing(folder: Path) -> list[str]:
        return sorted(p.name for p in folder.iterdir() if p.name != "__pycache__")

    assert listing(ROOT / "functions") == [
        "README.md", "__init__.py", "durable", "examples", "sdk"]
    assert listing(ROOT / "functions" / "durable") == ["__init__.py"]


def test_no_module_of_ours_stands_in_for_another() -> None:
    # The shims' trick: `sys.modules[__name__] = <another module>`.
    found = []
    for path in sources():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (isinstance(node, ast.Assign)
                    and any(isinstance(t, ast.Subscript) and ast.unparse(t.value) == "sys.modules"
                            and ast.unparse(t.slice) == "__name__" for t in node.targets)):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert found == []


def test_our_code_imports_no_removed_path() -> None:
    found = []
    for path in sources():
        for line, name in imported(path, ast.parse(path.read_text(), str(path))):
            if removed(name):
                found.append(f"{path.relative_to(ROOT)}:{line}: {name}")
    assert found == [], "import these from functions.sdk: " + ", ".join(found)


def test_the_checker_sees_each_form_of_import(tmp_path: Path) -> None:
    # The check above can fail: each of these names a removed path.
    code = textwrap.dedent("""
        import functions.protocol
        from functions.serving import BackgroundServer
        from functions import signing
        from functions.durable import call
        from ..durable.golden import check
        importlib.import_module("functions.lambda_adapter")
        from functions.durable import Context, step, workflow
        from functions.sdk import signing
        from functions.sdk.durable import stubs
    """)
    path = ROOT / "functions" / "examples" / "x.py"  # `..` is functions
    names = [name for _, name in imported(path, ast.parse(code)) if removed(name)]
    assert names == ["functions.protocol", "functions.serving",
                     "functions.serving.BackgroundServer", "functions.signing",
                     "functions.durable.call", "functions.durable.golden",
                     "functions.durable.golden.check", "functions.lambda_adapter"]


def test_no_handler_config_or_doc_names_a_removed_path() -> None:
    old = re.compile(r"(?<![\w./])functions[./](?:failures|lambda_adapter|protocol|serving|signing"
                     r"|durable[./](?:call|context|durations|errors|golden|parallel|steps"
                     r"|stream|stubs|workflow))\b")
    found = [f"{name}:{n}: {match.group()}"
             for name in TEXTS
             for n, text in enumerate((ROOT / name).read_text().splitlines(), 1)
             for match in old.finditer(text)]
    assert found == []


def test_functions_durable_exports_its_all_the_same_objects_as_the_package() -> None:
    # __all__ as written in the file, so that a name dropped from the imports shows.
    source = ROOT / "functions" / "durable" / "__init__.py"
    tree = ast.parse(source.read_text())
    (written,) = [ast.literal_eval(node.value) for node in tree.body
                  if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "__all__"]
    assert written == functions.durable.__all__ == functions.sdk.durable.__all__
    assert {"Context", "step", "workflow", "Workflow", "TerminalError",
            "RetryableError", "StepFailed", "seconds"} <= set(written)
    for name in written:
        assert getattr(functions.durable, name) is getattr(functions.sdk.durable, name), name
    out = fresh("""
        from functions.durable import *
        print(sorted(k for k in dir() if not k.startswith("_")))
    """)
    assert out.strip() == str(sorted(written))


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


def test_workflow_stays_the_decorator_whatever_is_imported_first() -> None:
    # Importing the submodule `functions.sdk.durable.workflow` binds it on its package, as
    # the import system does; both packages must still give the decorator.
    out = fresh("""
        import functions.sdk.durable.workflow
        from functions.durable import workflow
        from functions.sdk.durable import workflow as sdk_workflow
        from functions.sdk.durable.workflow import Workflow
        print(workflow is sdk_workflow and callable(workflow)
              and not isinstance(workflow, type(functions)), Workflow.__module__)
    """)
    assert out.split() == ["True", "functions.sdk.durable.workflow"]


def test_the_wire_format_loads_without_starlette_or_uvicorn() -> None:
    # The worker imports the protocol and signing; the app and its server load on use.
    out = fresh("""
        import sys
        import functions.sdk.protocol, functions.sdk.signing
        print(sorted({m.split(".")[0] for m in sys.modules} & {"starlette", "uvicorn"}))
        from functions.sdk import FunctionApp, serve
        print(sorted({m.split(".")[0] for m in sys.modules} & {"starlette", "uvicorn"}))
    """)
    assert out.splitlines() == ["[]", "['starlette', 'uvicorn']"]
