"""`orchestrator deploy` publishes the functions app's code as a version per change and
checks every open durable run before the current version moves (infra/deploy_versions.py):
the stack deployed through the emulator's CloudFormation, its functions Lambda's versions,
aliases and alias URLs made through the emulator's Lambda API, the registry in the
stack's control table, and real durable runs of tests/support/versioned_fns.py.

Two substitutions, both for what moto cannot do:
- its CloudFormation has no `AWS::Lambda::Url`, so the stack is deployed without the
  functions app's own URL (`FUNCTIONS_URL` empty, as for a stack without the app); the
  alias URLs are made through the Lambda API, which moto has;
- moto serves no Function URL. `LambdaUrls`, an httpx transport given to the deploy's
  check and to the test's worker, serves each Function URL moto answers with the real
  FunctionApp (uvicorn, over HTTP) standing for the code deployed when it was made: v1's
  code at the first deploy's URL, the next code at the next one's. Nothing else differs
  from AWS: the registry holds the URLs moto gave, and runs and checks call them.

moto also keeps one Function URL per function rather than per alias: the deploy notices
(infra/function_versions.py) and says so; on AWS each alias has its own."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

from functions.sdk.serving import BackgroundServer
from infra import deploy as d
from infra import deploy_versions as dv
from infra.emulator import Emulator
from orchestrator.adapters.aws import make_clients
from orchestrator.cli.commands import main
from orchestrator.settings import Settings
from tests.integration.test_cli_durable import until
from tests.support.harness import Harness, fresh_settings
from tests.support.versioned_fns import CALLS, SECRET, waiting_for_signal
from tests.support.versioned_fns import create_app as create_fns

pytestmark = pytest.mark.filterwarnings("ignore:Tried to parse AWS:UserWarning")

MANIFEST = """\
backends:
  shop:
    url: ${FUNCTIONS_URL:-http://127.0.0.1:9}
    secret: ${FUNCTIONS_SECRET:-}
workflows:
  order: { backend: shop, timeout: 30s }
"""


class LambdaUrls(httpx.BaseTransport):
    """Each Function URL the emulator's Lambda answers, served by the FunctionApp that
    stands for the code deployed when it was made (`deploying`)."""

    def __init__(self) -> None:
        self.hosts: dict[str, httpx.URL] = {}
        self.deploying: httpx.URL | None = None
        self.inner = httpx.HTTPTransport()

    def made(self, parsed: dict[str, Any], **_: Any) -> None:
        assert self.deploying is not None, "a Function URL made outside a deploy"
        self.hosts[httpx.URL(parsed["FunctionUrl"]).host] = self.deploying

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        served = self.hosts.get(request.url.host)
        if served is None:
            raise httpx.ConnectError(f"no Function URL {request.url.host}", request=request)
        request.url = request.url.copy_with(scheme=served.scheme, host=served.host,
                                            port=served.port)
        return self.inner.handle_request(request)


@dataclasses.dataclass
class Stack:
    name: str
    clients: Any
    urls: LambdaUrls
    apps: dict[int, str]
    tmp: Path
    emulator: Emulator
    deploys: int = 0
    manifest: str = MANIFEST

    def deploy(self, code: int, **kwargs: Any) -> dict[str, Any]:
        """Deploy the stack with the functions code of versioned_fns version `code` (each
        deploy's package differs: a new Lambda code package), then release it."""
        self.deploys += 1
        manifest = self.tmp / "orchestrator.yml"
        manifest.write_text(self.manifest + f"# code {code}, deploy {self.deploys}\n")
        plan = _without_function_urls(d.plan(
            manifest, self.name, region="us-east-1", no_deps=True,
            parameters={"DeployScripts": "no", "FunctionsSecret": SECRET}))
        d.deploy(self.clients, plan, d.package(plan), timeout=60, echo=lambda s: None)
        return self.release(code, manifest, plan.parameters, **kwargs)

    def release(self, code: int, manifest: Path, parameters: dict[str, str],
                **kwargs: Any) -> dict[str, Any]:
        self.urls.deploying = httpx.URL(self.apps[code])
        try:
            return dv.release(self.clients, self.name, manifest, parameters,
                              transport=self.urls, **kwargs)
        finally:
            self.urls.deploying = None

    def harness(self) -> Harness:
        """The stack's tables driven by a worker here, its calls through `urls`."""
        s = fresh_settings(self.emulator.url, prefix=self.name)
        h = Harness.build(s, self.manifest, self.tmp, {"FUNCTIONS_SECRET": SECRET},
                          clients=self.emulator.attach(make_clients(s)),
                          provision=lambda clients, prefix: None)
        h.start_workers(1, threads=4, transport=self.urls)
        return h

    def aliases(self) -> dict[str, str]:
        got = self.clients.lambda_.list_aliases(FunctionName=f"{self.name}-functions")
        return {a["Name"]: a["FunctionVersion"] for a in got["Aliases"]}


def _without_function_urls(plan: d.Plan) -> d.Plan:
    """The plan's template less what moto's CloudFormation cannot make: the Function URL
    resources, their permissions and outputs, and the variables that name them."""
    template = json.loads(json.dumps(plan.template))
    for key in [k for k in template["Resources"] if "FunctionUrl" in k or "FunctionURL" in k
                or k.startswith("Scripts")]:
        del template["Resources"][key]
    for key in ("FunctionsUrl", "ScriptsUrl"):
        template["Outputs"].pop(key, None)

    def strip(node: Any) -> Any:
        if isinstance(node, dict):
            if "Fn::If" in node and "FunctionUrl" in json.dumps(node):
                return ""
            return {k: strip(v) for k, v in node.items()}
        if isinstance(node, list):
            return [strip(v) for v in node]
        return node

    return dataclasses.replace(plan, template=strip(template))


@pytest.fixture(scope="module")
def apps() -> Iterator[dict[int, str]]:
    servers = {v: BackgroundServer(create_fns(v)) for v in (1, 2, 3)}
    try:
        yield {v: s.__enter__().url for v, s in servers.items()}
    finally:
        for s in servers.values():
            s.__exit__(None, None, None)


_made = 0


@pytest.fixture
def stack(emulator: Emulator, apps: dict[int, str], tmp_path: Path,
          monkeypatch: pytest.MonkeyPatch) -> Iterator[Stack]:
    global _made
    _made += 1
    for k, v in {"AWS_ENDPOINT_URL": emulator.url, "AWS_ACCESS_KEY_ID": "testing",
                 "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
                 "AWS_REGION": "us-east-1"}.items():
        monkeypatch.setenv(k, v)
    from orchestrator.cli.deploy import _clients

    clients = _clients(Settings.from_env())
    urls = LambdaUrls()
    clients.lambda_.meta.events.register("after-call.lambda.CreateFunctionUrlConfig",
                                         urls.made)
    yield Stack(f"dv{_made}", clients, urls, apps, tmp_path, emulator)


def _waiting(h: Harness, run_id: str) -> bool:
    return waiting_for_signal(h.rt.store, run_id)


def _open_runs(h: Harness, n: int) -> list[str]:
    ids = [h.start("order", {"n": i}) for i in range(n)]
    for run_id in ids:
        until(lambda rid=run_id: _waiting(h, rid))
    return ids


def _version(h: Harness, run_id: str) -> str | None:
    run = h.rt.store.runs.get_run(run_id, h.rt.clock())
    assert run is not None
    return run.version


def test_each_code_change_is_a_version_and_compatible_runs_move_to_it(stack: Stack) -> None:
    first = stack.deploy(1)
    assert first["ok"] and first["new"] and first["version"] == "v1"
    (shop,) = first["backends"]
    assert shop == {**shop, "backend": "shop", "was": None, "current": "v1", "promoted": True}
    assert stack.aliases() == {"v1": "1"}
    assert any("no Function URL per alias" in n for n in first["notes"])  # moto's, said
    h = stack.harness()
    try:
        runs = _open_runs(h, 2)
        assert [_version(h, r) for r in runs] == ["v1", "v1"]
        registry = h.rt.versions.registry("shop")
        assert registry.live["v1"].url == first["url"]

        second = stack.deploy(2)  # v2 changes what a step returns: compatible
        assert second["ok"] and second["version"] == "v2" and second["lambda_version"] == "2"
        (shop,) = second["backends"]
        assert shop["was"] == "v1" and shop["current"] == "v2" and shop["checked"] == 2
        assert sorted(shop["moved"]) == sorted(runs)
        assert [_version(h, r) for r in runs] == ["v2", "v2"]
        assert "shop: v2 is current (was v1); moved 2 runs" in dv.render(second)
        assert stack.aliases() == {"v1": "1", "v2": "2"}  # v1 is live: kept

        for run_id in runs:
            h.rt.signals.send(run_id, "go", {})
        for run_id in runs:
            assert h.wait(run_id)["output"] == {"charged_by": 2}
            assert CALLS.of(run_id) == [("reserve", 1), ("charge", 2)]

        # The same code again: nothing published, nothing moves.
        manifest = stack.tmp / "orchestrator.yml"
        plan = _without_function_urls(d.plan(
            manifest, stack.name, region="us-east-1", no_deps=True,
            parameters={"DeployScripts": "no", "FunctionsSecret": SECRET}))
        again = stack.release(2, manifest, plan.parameters, label="other")
        assert again["ok"] and not again["new"] and again["version"] == "v2"
        assert "--version-label other is not used" in " ".join(again["notes"])
        assert stack.aliases() == {"v1": "1", "v2": "2"}

        # v1 retired (no run on it any more): the next deploy removes its alias.
        h.rt.moves().retire("shop", "v1")
        third = stack.deploy(2, label="fix-42")
        assert third["version"] == "fix-42" and third["removed"] == ["v1"]
        assert stack.aliases() == {"v2": "2", "fix-42": "3"}
    finally:
        h.close()


def test_a_diverging_run_stops_the_promotion_unless_pinned(stack: Stack) -> None:
    first = stack.deploy(1)
    h = stack.harness()
    try:
        (run,) = _open_runs(h, 1)
        refused = stack.deploy(3)  # v3 issues a new step before the wait: diverging
        assert not refused["ok"]
        (shop,) = refused["backends"]
        assert shop["promoted"] is False and shop["current"] == "v1"
        (bad,) = shop["diverging"]
        assert bad["run_id"] == run and bad["recorded"]["name"] == "go"
        assert bad["issued"]["name"] == "audit"
        text = "\n".join(dv.render(refused))
        assert "shop: v2 NOT current (v1 stays)" in text
        assert (f"{run} (order, on v1) diverging at position 1: recorded signal 'go',"
                " issued step 'audit'") in text
        registry = h.rt.versions.registry("shop")
        assert registry.current == "v1" and set(registry.live) == {"v1", "v2"}
        assert _version(h, run) == "v1"

        # --pin-incompatible: the same code again, promoted; the run stays on v1.
        manifest = stack.tmp / "orchestrator.yml"
        plan = _without_function_urls(d.plan(
            manifest, stack.name, region="us-east-1", no_deps=True,
            parameters={"DeployScripts": "no", "FunctionsSecret": SECRET}))
        pinned = stack.release(3, manifest, plan.parameters, pin_incompatible=True)
        assert pinned["ok"] and not pinned["new"]
        (shop,) = pinned["backends"]
        assert shop["current"] == "v2" and shop["pinned"] == [run] and shop["moved"] == []
        assert _version(h, run) == "v1"
        assert h.rt.versions.registry("shop").live["v1"].url == first["url"]
        assert stack.aliases() == {"v1": "1", "v2": "2"}  # v1 kept: a run is pinned to it
        new = h.start("order", {"n": 9})
        until(lambda: _waiting(h, new))
        assert _version(h, new) == "v2"
        for run_id in (run, new):
            h.rt.signals.send(run_id, "go", {})
        assert h.wait(run)["output"] == {"charged_by": 1}  # v1's URL, still served
        assert h.wait(new)["output"] == {"charged_by": 3}
    finally:
        h.close()


def test_one_backend_diverging_keeps_every_backend_of_the_app_where_it_is(
        stack: Stack) -> None:
    """Two backends served by the one functions app share its versions: a promotion
    refused for one is refused for both (`depot` has a diverging run, `shop` none)."""
    stack.manifest = MANIFEST.replace("workflows:", """\
  depot:
    url: ${FUNCTIONS_URL:-http://127.0.0.1:9}
    secret: ${FUNCTIONS_SECRET:-}
workflows:
  restock: { backend: depot, workflow: order, timeout: 30s }""")
    first = stack.deploy(1)
    assert [(b["backend"], b["current"]) for b in first["backends"]] == [
        ("depot", "v1"), ("shop", "v1")]
    h = stack.harness()
    try:
        run = h.start("restock", {"n": 1})
        until(lambda: _waiting(h, run))
        refused = stack.deploy(3)
        assert not refused["ok"]
        assert {b["backend"]: (b["promoted"], b["current"], b["checked"])
                for b in refused["backends"]} == {"depot": (False, "v1", 1),
                                                  "shop": (False, "v1", 0)}
        assert {h.rt.versions.registry(b).current for b in ("shop", "depot")} == {"v1"}
        pinned = stack.release(3, stack.tmp / "orchestrator.yml",
                               {"Prefix": stack.name, "FunctionsSecret": SECRET},
                               pin_incompatible=True)
        assert pinned["ok"]
        assert {h.rt.versions.registry(b).current for b in ("shop", "depot")} == {"v2"}
        assert _version(h, run) == "v1"
    finally:
        h.close()


def test_the_dry_run_names_the_backends_a_version_is_published_for(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # touches nothing
    root = Path(__file__).resolve().parents[2]
    out = CliRunner().invoke(main, ["deploy", "--dry-run", "--manifest",
                                    str(root / "orchestrator.yml"), "--version-label", "r7"])
    assert out.exit_code == 0, out.output
    # The demo's durable workflows are on `api` (analytics and notify serve none).
    assert "versions: the functions code, if changed, published as version r7 of api" \
        in out.output
    bad = CliRunner().invoke(main, ["deploy", "--dry-run", "--manifest",
                                    str(root / "orchestrator.yml"), "--version-label", "r.7"])
    assert bad.exit_code == 2 and "--version-label 'r.7'" in bad.output


def test_bad_input_gets_a_clear_error_and_changes_nothing(stack: Stack) -> None:
    runner = CliRunner()
    manifest = stack.tmp / "orchestrator.yml"
    manifest.write_text(MANIFEST)
    for label, why in (("42", "not only digits"), ("a.b", "letters, digits, '-' and '_'"),
                       ("-x", "starting with a letter or digit"), ("x" * 65, "1 to 64")):
        out = runner.invoke(main, ["deploy", "--stack", stack.name, "--manifest",
                                   str(manifest), "--no-deps", "--version-label", label])
        assert out.exit_code == 2, out.output
        assert f"--version-label {label!r}" in out.output and why in out.output
    with pytest.raises(Exception, match="does not exist"):
        stack.clients.cloudformation.describe_stacks(StackName=stack.name)

    stack.deploy(1)
    lam = stack.clients.lambda_
    before = lam.get_function(FunctionName=f"{stack.name}-functions")["Configuration"]
    manifest.write_text(MANIFEST + "# changed\n")
    taken = runner.invoke(main, ["deploy", "--stack", stack.name, "--manifest", str(manifest),
                                 "--no-deps", "--version-label", "v1"])
    assert taken.exit_code == 2, taken.output
    assert "has an alias 'v1' already" in taken.output
    after = lam.get_function(FunctionName=f"{stack.name}-functions")["Configuration"]
    assert after["CodeSha256"] == before["CodeSha256"]  # not deployed
    assert stack.aliases() == {"v1": "1"}
