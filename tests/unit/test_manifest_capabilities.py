"""Backend capabilities: `capabilities: [shell]` on a backend, and
`Manifest.capable`, the first backend (declaration order) declaring one."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.errors import ManifestError
from orchestrator.manifest.loader import manifest_from_text
from orchestrator.manifest.models import Backend, Manifest

WORKFLOWS = """\
workflows:
  w: { steps: { a: { backend: api, route: /a } } }
"""


def load(text: str, folder: Path) -> Manifest:
    return manifest_from_text(text, base_dir=folder)


def test_a_backend_declares_no_capability_by_default() -> None:
    assert Backend(url="http://x").capabilities == []


def test_capable_names_the_first_backend_declaring_it(tmp_path: Path) -> None:
    manifest = load("""\
backends:
  api: { url: "http://127.0.0.1:8001" }
  runner: { url: "http://127.0.0.1:8002", capabilities: [gpu, shell] }
  other: { url: "http://127.0.0.1:8003", capabilities: [shell] }
""" + WORKFLOWS, tmp_path)
    assert manifest.backends["runner"].capabilities == ["gpu", "shell"]
    assert manifest.capable("shell") == "runner"
    assert manifest.capable("gpu") == "runner"
    assert manifest.capable("tpu") is None


def test_capable_follows_declaration_order_not_names(tmp_path: Path) -> None:
    manifest = load("""\
backends:
  zed: { url: "http://127.0.0.1:8001", capabilities: [shell] }
  api: { url: "http://127.0.0.1:8002", capabilities: [shell] }
""" + WORKFLOWS, tmp_path)
    assert manifest.capable("shell") == "zed"


@pytest.mark.parametrize("value, message", [
    ("shell", "should be a valid list"),
    ("[Shell]", "should match pattern"),
    ("['']", "should match pattern"),
])
def test_a_malformed_capability_is_refused_at_its_line(tmp_path: Path, value: str,
                                                       message: str) -> None:
    text = f"""\
backends:
  api:
    url: "http://127.0.0.1:8001"
    capabilities: {value}
""" + WORKFLOWS
    with pytest.raises(ManifestError) as caught:
        load(text, tmp_path)
    [problem] = caught.value.problems
    assert problem.startswith("manifest.yml:4: backends.api.capabilities"), problem
    assert message in problem
