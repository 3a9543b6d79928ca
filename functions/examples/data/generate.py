"""Regenerate the sample data of the monthly-report example (deterministic: same seed,
same bytes). Run from the repository root:

    python functions/examples/data/generate.py

users.csv   user_id,name,email,country,signed_up_on
orders.csv  order_id,user_id,ordered_at,sku,product,quantity,unit_price,status

Prices are EUR with two decimals; status is `paid` or `refunded`. Every order is placed
after its customer signed up, and the orders cover 2026-08 to 2026-10.
"""

from __future__ import annotations

import csv
import random
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

SEED = 20261001
HERE = Path(__file__).resolve().parent

FIRST = [
    "Anna", "Lukas", "Sofia", "Mateo", "Emma", "Noah", "Chloé", "Liam", "Ingrid", "Piotr",
    "Giulia", "Hugo", "Marta", "Jonas", "Olivia", "Arjun", "Elena", "Tomás", "Freya", "Karim",
]  # fmt: skip
LAST = [
    "Schmidt", "Dubois", "Rossi", "García", "Jansen", "Nowak", "Lindqvist", "Brown",
    "Müller", "Moreau", "Bianchi", "Fernández", "de Vries", "Kowalski", "Svensson", "Smith",
]  # fmt: skip
COUNTRIES = ["DE", "FR", "IT", "ES", "NL", "PL", "SE", "GB", "US"]
# sku, name, unit price (EUR); weights favour the cheap items, as real shops do.
CATALOG = [
    ("SKU-TEA-01", "Sencha green tea 100g", "8.90", 9),
    ("SKU-TEA-02", "Assam breakfast tea 250g", "12.50", 8),
    ("SKU-CUP-01", "Stoneware mug", "14.00", 6),
    ("SKU-POT-01", "Cast-iron teapot", "49.00", 3),
    ("SKU-KET-01", "Gooseneck kettle", "89.00", 2),
    ("SKU-SUB-01", "Tea club subscription (monthly)", "24.00", 5),
    ("SKU-GFT-01", "Gift box", "39.90", 3),
    ("SKU-INF-01", "Steel infuser", "6.50", 7),
]
MONTHS = [(2026, 8, 62), (2026, 9, 66), (2026, 10, 72)]


def make_users(rng: random.Random) -> list[dict[str, str]]:
    users = []
    start = date(2025, 1, 6)
    for n in range(1, 41):
        first, last = rng.choice(FIRST), rng.choice(LAST)
        # The last few customers sign up during the report months.
        offset = rng.randrange(0, 560) if n <= 34 else rng.randrange(575, 660)
        email_name = f"{first}.{last}".lower().replace(" ", "")
        email_name = email_name.translate(str.maketrans("éáüó", "eauo"))
        users.append(
            {
                "user_id": f"u_{n:03d}",
                "name": f"{first} {last}",
                "email": f"{email_name}{n}@example.com",
                "country": rng.choices(COUNTRIES, weights=[6, 4, 3, 3, 3, 2, 2, 3, 4])[0],
                "signed_up_on": (start + timedelta(days=offset)).isoformat(),
            }
        )
    return users


def make_orders(rng: random.Random, users: list[dict[str, str]]) -> list[dict[str, str]]:
    orders = []
    loyal = {u["user_id"]: rng.random() for u in users}  # some customers buy more often
    serial = 1000
    for year, month, count in MONTHS:
        first = datetime(year, month, 1, tzinfo=UTC)
        nxt = datetime(year + month // 12, month % 12 + 1, 1, tzinfo=UTC)
        stamps = sorted(
            first + timedelta(seconds=rng.randrange(int((nxt - first).total_seconds())))
            for _ in range(count)
        )
        for at in stamps:
            eligible = [u for u in users if date.fromisoformat(u["signed_up_on"]) <= at.date()]
            user = rng.choices(eligible, weights=[0.2 + loyal[u["user_id"]] for u in eligible])[0]
            sku, product, price, _ = rng.choices(CATALOG, weights=[c[3] for c in CATALOG])[0]
            serial += rng.randrange(1, 4)
            orders.append(
                {
                    "order_id": f"ord_{serial:06d}",
                    "user_id": user["user_id"],
                    "ordered_at": at.strftime("%Y-%m-%dT%H:%M:%SZ"),
                    "sku": sku,
                    "product": product,
                    "quantity": str(rng.choices([1, 2, 3, 4], weights=[10, 5, 2, 1])[0]),
                    "unit_price": price,
                    "status": "refunded" if rng.random() < 0.06 else "paid",
                }
            )
    return orders


def write(path: Path, rows: list[dict[str, str]]) -> None:
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)


def main() -> None:
    rng = random.Random(SEED)
    users = make_users(rng)
    orders = make_orders(rng, users)
    write(HERE / "users.csv", users)
    write(HERE / "orders.csv", orders)
    print(f"wrote {len(users)} users and {len(orders)} orders to {HERE}")


if __name__ == "__main__":
    main()
