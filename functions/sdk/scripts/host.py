"""`ScriptHost`: a FunctionApp serving bash scripts as durable workflows.

    host = ScriptHost(secret="...", directory=Path("scripts"))
    app = host.app      # POST /durable/<name> per scripts/<name>.sh, /durable/activity, /run

Every `<name>.sh` of `directory` is listed as workflow `<name>`; any other name is served
too when the call carries its `script` (the text, or where to fetch it). A name with
neither fails its run with a message naming the script."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from functions.sdk.app import FunctionApp
from functions.sdk.durable.context import Context
from functions.sdk.durable.workflow import Workflow
from functions.sdk.scripts.activity import ACTIVITY, activity_workflow
from functions.sdk.scripts.run import run_script
from functions.sdk.scripts.shell import RUN_ROUTE, run_step
from functions.sdk.scripts.texts import Texts

__all__ = ["ScriptHost"]

_NAME = re.compile(r"[A-Za-z0-9._~\-]+")


class ScriptHost:
    """Serves the scripts of `directory` (and any script a call carries) on the durable
    protocol, with the activity workflow and the `/run` step route. `secret` and `clock`
    are the FunctionApp's (the signing secret, or None for unsigned local calls)."""

    def __init__(self, secret: str | Sequence[str] | None = None,
                 directory: str | Path | None = None, *,
                 clock: Callable[[], float] = time.time, title: str = "scripts") -> None:
        self.directory = None if directory is None else Path(directory)
        self.texts = Texts(self.directory)
        self.app = FunctionApp(secret, title=title, clock=clock)
        for name in self.texts.listed():
            if name == ACTIVITY:
                raise ValueError(f"{self.directory}/{name}.sh: the name {name!r} is the"
                                 " activity workflow's: rename the script")
            if not _NAME.fullmatch(name):
                raise ValueError(f"{self.directory}/{name}.sh: a script's name uses letters,"
                                 " digits and . _ ~ - only")
            self.app.workflow(self.workflow(name))
        self.app.workflow(activity_workflow())
        self.app.resolve_workflows(self._resolve)
        self.app.step(RUN_ROUTE)(run_step)

    def _resolve(self, name: str) -> Workflow | None:
        """A name the host did not list: a script's name (never a path: no `/`)."""
        return self.workflow(name) if _NAME.fullmatch(name) and name != ".." else None

    def workflow(self, name: str) -> Workflow:
        """The durable workflow that runs script `name`."""
        texts = self.texts

        async def script(ctx: Context, payload: Any) -> dict[str, Any]:
            return await run_script(ctx, name, payload, texts)

        return Workflow(name, script)
