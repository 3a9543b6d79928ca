"""A small shop's back office, on local files: customers, a catalogue with stock, a
payments ledger and a carrier. `send-welcome-email` and `process-order` work on it.

Amounts are integer cents. Every write that must not repeat takes an idempotency key
(see `store.Records.apply`); refusals a retry cannot fix are `TerminalError`s."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from functions.examples.durable.store import Records
from functions.sdk.failures import TerminalError

__all__ = ["CARRIER_COUNTRIES", "Customers", "Inventory", "Payments", "Shipping", "Shop"]

# Where the carrier delivers: an order to anywhere else fails at shipping.
CARRIER_COUNTRIES = ("DE", "ES", "FR", "IE", "IT", "NL", "PT")


def _customers() -> dict[str, Any]:
    return {"customers": {
        "user-123": {"id": "user-123", "name": "Ada Lovelace", "email": "ada@example.com",
                     "country": "PT"},
        "user-456": {"id": "user-456", "name": "Alan Turing", "email": "alan@example.com",
                     "country": "IE"},
        "user-789": {"id": "user-789", "name": "Grace Hopper", "email": "grace@example.com",
                     "country": "US"},
    }}


def _catalogue() -> dict[str, Any]:
    return {"products": {
        "mug": {"sku": "mug", "name": "Enamel mug", "price": 1250, "stock": 40},
        "tee": {"sku": "tee", "name": "Organic T-shirt", "price": 2400, "stock": 25},
        "cap": {"sku": "cap", "name": "Canvas cap", "price": 1800, "stock": 10},
        "poster": {"sku": "poster", "name": "Poster, A2", "price": 900, "stock": 3},
    }}


class Customers:
    def __init__(self, root: Path) -> None:
        self.records = Records(root / "customers.json", _customers)

    def get(self, customer_id: str) -> dict[str, Any]:
        found: dict[str, Any] | None = self.records.read()["customers"].get(customer_id)
        if found is None:
            raise TerminalError(f"no customer {customer_id!r}", code="unknown_customer")
        return found

    def add(self, customer: dict[str, Any]) -> None:
        with self.records.change() as doc:
            doc["customers"][customer["id"]] = customer


class Inventory:
    def __init__(self, root: Path) -> None:
        self.records = Records(root / "inventory.json", _catalogue)

    def quote(self, items: Any) -> dict[str, Any]:
        """Order lines priced from the catalogue, and their total; TerminalError for an
        unknown product or a quantity that is not a positive integer."""
        if not isinstance(items, list) or not items:
            raise TerminalError("an order needs items: [{sku, quantity}, ...]",
                                code="invalid_order")
        products = self.records.read()["products"]
        lines = []
        for i, item in enumerate(items):
            sku = item.get("sku") if isinstance(item, dict) else None
            qty = item.get("quantity", 1) if isinstance(item, dict) else None
            if sku not in products:
                raise TerminalError(f"items[{i}]: no product {sku!r} (the catalogue has "
                                    f"{', '.join(sorted(products))})", code="invalid_order")
            if isinstance(qty, bool) or not isinstance(qty, int) or qty < 1:
                raise TerminalError(f"items[{i}].quantity must be a positive integer, got "
                                    f"{qty!r}", code="invalid_order")
            price = products[sku]["price"]
            lines.append({"sku": sku, "quantity": qty, "price": price, "amount": price * qty})
        return {"lines": lines, "total": sum(line["amount"] for line in lines)}

    def stock(self, sku: str) -> int:
        return int(self.records.read()["products"][sku]["stock"])

    def reserve(self, order_id: str, lines: list[dict[str, Any]], *, key: str) -> dict[str, Any]:
        """Take the lines' quantities out of stock, all or none."""
        def effect(doc: dict[str, Any]) -> dict[str, Any]:
            products = doc["products"]
            short = [f"{line['sku']} ({products[line['sku']]['stock']} left)" for line in lines
                     if products[line["sku"]]["stock"] < line["quantity"]]
            if short:
                raise TerminalError(f"order {order_id}: not enough {', '.join(short)}",
                                    code="out_of_stock")
            for line in lines:
                products[line["sku"]]["stock"] -= line["quantity"]
            reserved = {line["sku"]: line["quantity"] for line in lines}
            doc.setdefault("reservations", {})[order_id] = reserved
            return {"order": order_id, "reserved": reserved}
        answer: dict[str, Any] = self.records.apply(key, effect)
        return answer

    def release(self, order_id: str, *, key: str) -> dict[str, Any]:
        """Put an order's reservation back into stock (once)."""
        def effect(doc: dict[str, Any]) -> dict[str, Any]:
            reserved = doc.get("reservations", {}).pop(order_id, {})
            for sku, qty in reserved.items():
                doc["products"][sku]["stock"] += qty
            return {"order": order_id, "released": reserved}
        answer: dict[str, Any] = self.records.apply(key, effect)
        return answer


class Payments:
    """A ledger of charges and refunds."""

    def __init__(self, root: Path) -> None:
        self.records = Records(root / "payments.json", lambda: {"entries": []})

    def entries(self, order_id: str | None = None) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = self.records.read()["entries"]
        return [e for e in found if order_id is None or e["order"] == order_id]

    def charge(self, order_id: str, customer_id: str, amount: int, *, key: str) -> dict[str, Any]:
        def effect(doc: dict[str, Any]) -> dict[str, Any]:
            entry = {"id": f"ch_{len(doc['entries']) + 1:05d}", "kind": "charge",
                     "order": order_id, "customer": customer_id, "amount": amount, "key": key}
            doc["entries"].append(entry)
            return entry
        answer: dict[str, Any] = self.records.apply(key, effect)
        return answer

    def refund(self, charge: dict[str, Any], *, key: str) -> dict[str, Any]:
        """Pay a charge back in full."""
        def effect(doc: dict[str, Any]) -> dict[str, Any]:
            entry = {"id": f"re_{len(doc['entries']) + 1:05d}", "kind": "refund",
                     "order": charge["order"], "customer": charge["customer"],
                     "amount": -charge["amount"], "charge": charge["id"], "key": key}
            doc["entries"].append(entry)
            return entry
        answer: dict[str, Any] = self.records.apply(key, effect)
        return answer


class Shipping:
    """The carrier: a parcel per order, to the countries it serves."""

    def __init__(self, root: Path) -> None:
        self.records = Records(root / "shipments.json", lambda: {"parcels": {}})

    def parcels(self) -> dict[str, Any]:
        found: dict[str, Any] = self.records.read()["parcels"]
        return found

    def ship(self, order_id: str, address: dict[str, Any], *, key: str) -> dict[str, Any]:
        country = str(address.get("country", "")).upper()
        if country not in CARRIER_COUNTRIES:
            raise TerminalError(f"order {order_id}: the carrier does not deliver to "
                                f"{country or 'an address without a country'}",
                                code="undeliverable")

        def effect(doc: dict[str, Any]) -> dict[str, Any]:
            parcel = {"tracking": f"PK{len(doc['parcels']) + 1:06d}{country}",
                      "order": order_id, "address": address}
            doc["parcels"][order_id] = parcel
            return parcel
        answer: dict[str, Any] = self.records.apply(key, effect)
        return answer


@dataclass(frozen=True)
class Shop:
    customers: Customers
    inventory: Inventory
    payments: Payments
    shipping: Shipping

    @classmethod
    def at(cls, root: Path) -> Shop:
        return cls(Customers(root), Inventory(root), Payments(root), Shipping(root))
