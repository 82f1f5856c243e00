"""`python -m tools.soak`: the soak, run from a checkout (see `tools.soak` for what it does)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from tools.soak import STORES, soak_main


def main(argv: Sequence[str] | None = None) -> int:
    soak = argparse.ArgumentParser(
        prog="python -m tools.soak",
        description="many runs with random remote faults, cancels and reconnecting viewers; "
        "then account for every event, result and resource",
    )
    soak.add_argument("--minutes", type=float, default=None, help="how long (default: 1)")
    soak.add_argument("--seed", type=int, help="the fault draw's seed (default: random, printed)")
    soak.add_argument(
        "--runs",
        type=int,
        default=8,
        metavar="R",
        help="runs open at once (default: 8)",
        dest="concurrency",
    )
    soak.add_argument(
        "--total", type=int, help="stop after this many runs instead of after --minutes"
    )
    soak.add_argument(
        "--store",
        choices=STORES,
        default="memory",
        help="where the engines keep runs: in memory, a SQLite file in a temporary directory, "
        "or a redis-server the soak starts (default: memory)",
    )
    soak.add_argument(
        "--nodes",
        type=int,
        default=1,
        metavar="N",
        help="server nodes sharing the store (more than 1 only with --store redis; default: 1)",
    )
    args = soak.parse_args(argv)
    if args.nodes < 1:
        soak.error(f"--nodes must be at least 1, got {args.nodes}")
    if args.nodes > 1 and args.store != "redis":
        soak.error("--nodes above 1 needs a shared store: --store redis")
    minutes = args.minutes if args.minutes is not None or args.total else 1.0
    return soak_main(
        minutes=minutes,
        seed=args.seed,
        runs=args.total,
        concurrency=args.concurrency,
        out=sys.stdout,
        store=args.store,
        nodes=args.nodes,
    )


if __name__ == "__main__":
    sys.exit(main())
