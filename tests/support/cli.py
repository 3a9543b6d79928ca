"""Driving the `orchestrator` command in-process (click's runner, real HTTP to the API)."""

from __future__ import annotations

import json
from typing import Any

from click.testing import CliRunner

from orchestrator.cli.commands import main


def cli(*args: str) -> Any:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def out_json(res: Any) -> Any:
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)
