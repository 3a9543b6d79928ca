"""`fetch-rates` (a retry with backoff; README, "Durable examples"): fetch exchange rates
from a feed that sometimes fails, waiting longer after each failure, then store them.

    orchestrator trigger fetch-rates --wait --input '{"base": "EUR", "outages": 2}'

`fetch-rates` has 5 attempts (`retries=4`) and waits 2 s, 4 s, 8 s, 16 s between them
(exponential backoff from 2 s). It retries only `FeedUnavailable` (`retry_on`): an
unknown currency fails the run on the first attempt, since asking again cannot help.
The run holds nothing while it waits, and only the attempt that succeeded is recorded.

`RatesFeed` stands in for a remote API: it serves a fixed table, and fails the first
`outages` requests of a step (counted by its idempotency key) to show the retries.
Every request is written to `rates/requests.jsonl`; the rates to `rates/<base>-<day>.json`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from functions.durable import Context, Workflow, step, workflow
from functions.examples.durable.store import Log, write_atomic
from functions.sdk.failures import TerminalError

__all__ = ["FeedUnavailable", "RatesFeed", "UnknownCurrency", "fetch_rates"]

# Units of each currency per euro.
EURO_RATES = {"EUR": 1.0, "USD": 1.0832, "GBP": 0.8571, "CHF": 0.9412, "JPY": 162.41,
              "SEK": 11.283, "PLN": 4.3135}


class FeedUnavailable(ConnectionError):
    """The feed did not answer: worth asking again later."""


class UnknownCurrency(LookupError):
    """The feed has no such currency: asking again cannot help."""


class RatesFeed:
    def __init__(self, root: Path) -> None:
        self.folder = root / "rates"
        self.requests = Log(self.folder / "requests.jsonl")

    def fetch(self, base: str, outages: int, *, attempt: int, key: str) -> dict[str, Any]:
        earlier = len(self.requests.entries(key=key))
        if earlier < outages:
            self.requests.add(key=key, base=base, attempt=attempt, outcome="unavailable")
            raise FeedUnavailable(f"the rates feed did not answer (outage {earlier + 1} of "
                                  f"{outages})")
        if base not in EURO_RATES:
            self.requests.add(key=key, base=base, attempt=attempt, outcome="unknown")
            raise UnknownCurrency(f"the feed has no currency {base!r} (it has "
                                  f"{', '.join(sorted(EURO_RATES))})")
        self.requests.add(key=key, base=base, attempt=attempt, outcome="ok")
        per_base = EURO_RATES[base]
        return {"base": base, "rates": {cur: round(rate / per_base, 6)
                                        for cur, rate in sorted(EURO_RATES.items())
                                        if cur != base}}

    def store(self, quote: dict[str, Any], day: str) -> dict[str, Any]:
        path = self.folder / f"{quote['base']}-{day}.json"
        write_atomic(path, (json.dumps({**quote, "day": day}, indent=2, sort_keys=True)
                            + "\n").encode())
        return {"path": str(path), "currencies": len(quote["rates"])}


def fetch_rates(feed: RatesFeed) -> Workflow:
    """The workflow, on `feed`."""

    @workflow("fetch-rates", max_steps=5, execution_timeout="1h")
    async def run(ctx: Context, payload: dict[str, Any]) -> dict[str, Any]:
        payload = payload or {}
        base = str(payload.get("base", "EUR")).upper()
        outages = payload.get("outages", 0)
        if isinstance(outages, bool) or not isinstance(outages, int) or outages < 0:
            raise TerminalError(f"input.outages must be a count, got {outages!r}",
                                code="invalid_input")

        def fetch() -> dict[str, Any]:  # ctx.attempt and the key exist inside the step
            return feed.fetch(base, outages, attempt=ctx.attempt, key=ctx.idempotency_key)

        quote = await step("fetch-rates", fetch, retries=4, backoff="exponential",
                           delay="2s", retry_on=FeedUnavailable)
        day = ctx.now().date().isoformat()  # when fetch-rates ended
        saved = await step("store-rates", feed.store, quote, day)
        return {"base": base, "day": day, **saved}

    return run
