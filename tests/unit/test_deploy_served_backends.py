"""Which backends a deploy publishes the functions app's versions for
(infra/deploy_versions.py `served_backends`): those whose URL is the app's, read as the
deployed functions read the manifest, that a durable workflow names, and that declare no
`versions:` of their own."""

from __future__ import annotations

from pathlib import Path

from infra.deploy_versions import Served, served_backends

MANIFEST = """\
backends:
  shop: { url: "${FUNCTIONS_URL:-http://127.0.0.1:8001}", secret: "${FUNCTIONS_SECRET:-}" }
  billing: { url: "${FUNCTIONS_URL}/billing" }
  dag: { url: "${FUNCTIONS_URL}" }
  elsewhere: { url: "https://elsewhere.example" }
  pinned:
    versions: { a: "https://a.example" }
    current: a
workflows:
  order: { backend: shop }
  invoice: { backend: billing }
  other: { backend: elsewhere }
  old: { backend: pinned }
  report:
    steps:
      a: { backend: dag, route: /a }
"""


def test_the_backends_at_the_functions_app_with_durable_workflows(tmp_path: Path) -> None:
    manifest = tmp_path / "orchestrator.yml"
    manifest.write_text(MANIFEST)
    assert served_backends(manifest, {"Prefix": "p", "FunctionsSecret": "s3cret"}) == [
        Served("billing", "/billing", None), Served("shop", "", "s3cret")]
    # No secret deployed: its calls are not signed, as the deployed worker's are not.
    assert served_backends(manifest, {"Prefix": "p"})[1] == Served("shop", "", None)
