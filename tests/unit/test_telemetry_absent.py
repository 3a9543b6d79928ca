"""The core runs without the `otel` extra: with OpenTelemetry unimportable (a fresh
interpreter where `import opentelemetry` fails), tracing asked for is off with a warning,
and every helper is a no-op."""

from __future__ import annotations

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import logging, sys
    sys.modules["opentelemetry"] = None  # `import opentelemetry...` raises ImportError
    logging.basicConfig(level=logging.WARNING)
    from functions.sdk import tracing
    from orchestrator import telemetry
    from orchestrator.settings import Settings
    assert not telemetry.AVAILABLE and not tracing.AVAILABLE
    assert telemetry.setup(Settings(tracing=True)) is False
    assert not telemetry.active()
    headers = {"traceparent": tracing.traceparent(tracing.trace_id_of("r"), 1)}
    with tracing.handler_span(headers, "step /x", {}), telemetry.run_span("r", "w", "api", 0.0):
        with tracing.step_body_span("r", "op", "s", 1):
            telemetry.operation_span("r", {"id": "op"})
    telemetry.inject(headers)
    assert telemetry.message_attributes("r") is None
    print("ok")
""")


def test_without_opentelemetry_tracing_is_off_and_says_why() -> None:
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
    assert "pip install 'orchestrator[otel]'" in done.stderr
