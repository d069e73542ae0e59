"""Writes the synthetic click logs the wide-and-deep example trains on: sharded CSV files.

    python examples/wide_deep/make_clicks_data.py --out_dir=examples/wide_deep/data

Columns: clicked (0/1), user_id, ad_id, site_id, hour (0-23), price. A click
depends on a hidden affinity of each user for each ad category, on the site,
and on the hour: the deep part learns the first, the wide part the crosses.
"""

import argparse
import os

import numpy as np

USERS, ADS, SITES, CATEGORIES = 300, 200, 50, 8
HEADER = "clicked,user_id,ad_id,site_id,hour,price"


def make_rows(count: int, rng: np.random.Generator, world: dict) -> list[str]:
    user = rng.integers(0, USERS, count)
    ad = rng.integers(0, ADS, count)
    site = rng.integers(0, SITES, count)
    hour = rng.integers(0, 24, count)
    price = rng.gamma(2.0, 1.5, count).round(2)
    score = (
        world["affinity"][user, world["category"][ad]]
        + world["site_bias"][site]
        + np.where((hour >= 18) & (hour <= 23), 0.8, -0.3)
        - 0.15 * price
    )
    clicked = (score + rng.logistic(0, 0.5, count) > 0).astype(int)
    return [f"{c},{u},{a},{s},{h},{p}" for c, u, a, s, h, p in zip(clicked, user, ad, site, hour, price, strict=True)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out_dir", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "data"))
    parser.add_argument("--train_shards", type=int, default=8)
    parser.add_argument("--rows_per_shard", type=int, default=4000)
    args = parser.parse_args()
    rng = np.random.default_rng(2026)
    world = {
        "affinity": rng.normal(0, 1.5, (USERS, CATEGORIES)),
        "category": rng.integers(0, CATEGORIES, ADS),
        "site_bias": rng.normal(0, 0.7, SITES),
    }
    os.makedirs(args.out_dir, exist_ok=True)
    shards = [(f"train-{i:05d}-of-{args.train_shards:05d}.csv", args.rows_per_shard) for i in range(args.train_shards)]
    for name, rows in [*shards, ("eval-00000-of-00001.csv", args.rows_per_shard)]:
        with open(os.path.join(args.out_dir, name), "w", encoding="utf-8") as handle:
            handle.write("\n".join([HEADER, *make_rows(rows, rng, world)]) + "\n")
    print(f"wrote {len(shards)} training shards and 1 eval shard to {args.out_dir}")


if __name__ == "__main__":
    main()
