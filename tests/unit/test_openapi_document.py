"""The API's OpenAPI document, pinned: tests/fixtures/api/openapi.json holds it as built
for version "0" with the default Idempotency-Key retention, byte for byte (key order
included, since clients and generators see the order). A change to the document is
deliberate: regenerate the fixture with `python -m tests.unit.test_openapi_document` and
review its diff."""

from __future__ import annotations

import json
from pathlib import Path

from orchestrator.api.openapi import openapi_document

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "api" / "openapi.json"


def rendered() -> str:
    return json.dumps(openapi_document("0"), indent=2, ensure_ascii=False) + "\n"


def test_the_document_is_the_pinned_one() -> None:
    assert rendered() == FIXTURE.read_text(encoding="utf-8"), (
        "the OpenAPI document changed; if that is meant, regenerate the fixture with"
        " `python -m tests.unit.test_openapi_document` and review its diff")


def test_the_retention_quoted_is_the_one_given() -> None:
    doc = openapi_document("0", idempotency_retention=2 * 3600.0)
    header = doc["paths"]["/runs"]["post"]["parameters"][0]
    assert "Keys are kept 2 h." in header["description"]
    assert "`Idempotency-Key` on POST /runs is kept 2 h." in doc["info"]["description"]


if __name__ == "__main__":
    FIXTURE.parent.mkdir(parents=True, exist_ok=True)
    FIXTURE.write_text(rendered(), encoding="utf-8")
    print(f"wrote {FIXTURE}")
