"""The error-code registry: one entry per code, each documented in the README."""

from __future__ import annotations

from pathlib import Path

from orchestrator.errors import Code, error_doc

README = Path(__file__).resolve().parents[2] / "README.md"


def test_codes_are_unique_and_each_says_what_it_means() -> None:
    assert len({c.value for c in Code}) == len(Code)
    for code in Code:
        assert code.meaning and code.retryable in (True, False, None), code


def test_the_readme_lists_every_code() -> None:
    text = README.read_text()
    missing = [c.value for c in Code if f"`{c.value}`" not in text]
    assert not missing, f"README.md does not list {missing}"


def test_an_error_document_has_a_code_and_a_message() -> None:
    assert error_doc(Code.TIMEOUT, "no answer within 5s", attempt=2, status=None) == {
        "code": "timeout", "message": "no answer within 5s", "attempt": 2,
    }


def test_history_keeps_errors_as_json_text_never_a_printout() -> None:
    from orchestrator.adapters.store.tables import short_error

    assert short_error({"code": "http_error", "status": 500, "reason": {"why": "db"}}) == {
        "code": "http_error", "message": '{"why":"db"}',
    }
    assert short_error({"code": "timeout", "message": "x" * 400})["message"] == "x" * 300


def test_every_durable_code_the_sdk_reports_is_in_the_registry() -> None:
    from functions.sdk.protocol import DurableCode

    for code in DurableCode:
        assert Code(code.value).meaning, code
