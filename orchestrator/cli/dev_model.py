"""The AWS model as `orchestrator dev` takes it (`--aws-model [FILE]`, or
ORCH_EMULATOR_MODEL): where the setting came from, the model it names, and what to say
when there is no embedded emulator to apply it to (infra/emulator/aws_model.py)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from orchestrator.errors import UsageError
from orchestrator.settings import EMULATOR_MODEL_VARIABLE, ENDPOINT_VARIABLE, Settings

__all__ = ["asked", "loaded", "without_emulator"]


def asked(flag: str | None, environ: Mapping[str, str]) -> tuple[str, str]:
    """Where the setting came from (the flag wins over the variable, so `--aws-model off`
    turns the variable's off) and its value, as written."""
    if flag is not None:
        return "--aws-model", flag
    return EMULATOR_MODEL_VARIABLE, environ.get(EMULATOR_MODEL_VARIABLE, "")


def loaded(source: str, value: str) -> tuple[Path | None, Any]:
    """The model file's absolute path (the emulator's process may run elsewhere) and the
    model, or (None, None); a bad file is a usage error naming the source, file and field."""
    from infra.emulator.aws_model import AwsModelError, load, model_file

    path = model_file(value)
    if path is None:
        return None, None
    try:
        model = load(path)
    except AwsModelError as exc:  # its text names the file and the field
        raise UsageError(f"{source}: {exc}") from exc
    return path.resolve(), model


def without_emulator(source: str, value: str, settings: Settings,
                     echo: Callable[[str], None]) -> None:
    """The AWS model is the embedded emulator's: asked for by the flag without it, a
    usage error; by the variable only (set for other runs too), one line, and on."""
    from infra.emulator.aws_model import model_file

    if model_file(value) is None:
        return
    configured = settings.endpoint_url or settings.service_endpoints
    why = f"{ENDPOINT_VARIABLE}* is set" if configured else "--no-emulator"
    if source == "--aws-model":
        raise UsageError(f"--aws-model needs the embedded emulator, which is not used"
                         f" here ({why}): drop --aws-model, or the endpoint")
    echo(f"emulator   {source}={value} does not apply: the embedded emulator is not"
         f" used ({why})")
