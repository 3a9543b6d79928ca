"""`book-trip` (a saga; README, "Durable examples"): book a flight, a hotel and a car one
by one; when a booking fails, cancel the ones made, newest first, and fail the run.

    orchestrator trigger book-trip --wait --input '{"trip": "t-1",
      "traveller": "ada@example.com", "flight": "LIS", "hotel": "LIS", "car": "LIS"}'

No car is left in LIS, so the hotel and then the flight are cancelled and the run ends
`failed` with the car's error (ask for a car in OPO and the trip is booked and
confirmed by mail). `booked` is plain workflow state: every call replays the recorded
bookings into it, so a call that resumes after a crash or a wait cancels the same
bookings and books nothing again. Each cancel is a step of its own, so one that is
already recorded is not repeated; one that ran but was not recorded (the worker died)
runs again with the same idempotency key, and the desk cancels once. Cancels retry for
about a day: a cancel that failed for good would leave the older bookings in place.

`Desk` keeps availability and bookings in `travel/bookings.json`, and every request it
gets, repeats included, in `travel/requests.jsonl`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from functions.durable import Context, StepFailed, Workflow, step, workflow
from functions.examples.durable.common import keyed, required
from functions.examples.durable.mail import Outbox
from functions.examples.durable.orders import compensation
from functions.examples.durable.store import Log, Records
from functions.sdk.failures import TerminalError

__all__ = ["KINDS", "Desk", "book_trip"]

KINDS = ("flight", "hotel", "car")
_PREFIX = {"flight": "FL", "hotel": "HT", "car": "CR"}


def _availability() -> dict[str, Any]:
    return {"available": {"flight": {"LIS": 9, "OPO": 9, "MAD": 9},
                          "hotel": {"LIS": 4, "OPO": 4, "MAD": 4},
                          "car": {"LIS": 0, "OPO": 3, "MAD": 2}},
            "bookings": {}}


class Desk:
    """A travel desk: bookings against a limited number of places per city."""

    def __init__(self, root: Path) -> None:
        self.records = Records(root / "travel" / "bookings.json", _availability)
        self.requests = Log(root / "travel" / "requests.jsonl")

    def bookings(self, trip: str | None = None) -> list[dict[str, Any]]:
        found: dict[str, dict[str, Any]] = self.records.read()["bookings"]
        return [b for b in found.values() if trip is None or b["trip"] == trip]

    def book(self, trip: str, kind: str, city: str, *, key: str) -> dict[str, Any]:
        first = not self.records.applied(key)
        self.requests.add(op="book", trip=trip, kind=kind, city=city, key=key, repeat=not first)

        def effect(doc: dict[str, Any]) -> dict[str, Any]:
            left = doc["available"].get(kind, {}).get(city, 0)
            if left < 1:
                raise TerminalError(f"no {kind} left in {city}", code="sold_out")
            doc["available"][kind][city] = left - 1
            booking = {"id": f"{_PREFIX[kind]}-{len(doc['bookings']) + 1:04d}", "trip": trip,
                       "kind": kind, "city": city, "status": "booked"}
            doc["bookings"][booking["id"]] = booking
            return booking
        answer: dict[str, Any] = self.records.apply(key, effect)
        return answer

    def cancel(self, booking: dict[str, Any], *, key: str) -> dict[str, Any]:
        first = not self.records.applied(key)
        self.requests.add(op="cancel", trip=booking["trip"], kind=booking["kind"],
                          booking=booking["id"], key=key, repeat=not first)

        def effect(doc: dict[str, Any]) -> dict[str, Any]:
            stored = doc["bookings"][booking["id"]]
            if stored["status"] == "booked":
                stored["status"] = "cancelled"
                doc["available"][stored["kind"]][stored["city"]] += 1
            return dict(stored)
        answer: dict[str, Any] = self.records.apply(key, effect)
        return answer


def book_trip(desk: Desk, outbox: Outbox) -> Workflow:
    """The workflow, on `desk`, mailing through `outbox`."""

    @workflow("book-trip", max_steps=20, execution_timeout="2d")
    async def run(ctx: Context, payload: dict[str, Any]) -> dict[str, Any]:
        trip = required(payload, "trip")
        wanted = [(kind, str(payload[kind])) for kind in KINDS if payload.get(kind)]
        booked: list[dict[str, Any]] = []  # in the order they were made
        try:
            for kind, city in wanted:
                booked.append(await step(f"book-{kind}", keyed(ctx, desk.book, trip, kind,
                                                               city)))
        except StepFailed:
            for booking in reversed(booked):
                await compensation(f"cancel-{booking['kind']}",
                                   keyed(ctx, desk.cancel, booking))
            raise  # the run fails with the booking's error, after the cancels
        traveller = payload.get("traveller")
        if traveller:
            await step("confirm", keyed(
                ctx, outbox.send, str(traveller), f"Trip {trip} is booked",
                "".join(f"{b['kind']} in {b['city']}: {b['id']}\n" for b in booked)))
        return {"trip": trip, "bookings": [b["id"] for b in booked]}

    return run
