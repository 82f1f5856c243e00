"""Benchmarks of the engine and its edges, printed beside this machine's raw limits.

A developer tool run from a checkout, not part of the installed package:

    python -m tools.bench journal | a2a | mcp | sse | scale | store [options]

Each bench measures one path against the floor it cannot beat on this machine (a bare Trio
channel, the bare a2a-sdk client, a bare mcp server, a raw ASGI app writing the same bytes) and
prints both side by side; `a2a` and `sse` also measure the engine with tracing off and on
(`tools.bench.tracing`). Figures are never asserted in tests; the smoke tests only check that
each bench runs and prints its table.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tools.bench",
        description="Micro-benchmarks, printed beside this machine's limits.",
    )
    bench_sub = parser.add_subparsers(dest="bench", required=True, metavar="BENCH")
    journal = bench_sub.add_parser(
        "journal", help="journal append + fan-out events/s vs a bare Trio memory channel"
    )
    journal.add_argument("--events", type=int, default=200_000, help="events per measurement")
    journal.add_argument(
        "--subscribers", default="1,100", help="comma-separated subscriber counts to measure"
    )
    journal.add_argument("--repeat", type=int, default=3, help="runs per figure (median kept)")
    a2a = bench_sub.add_parser(
        "a2a",
        help="A2A stream events/s through the engine vs a bare a2a-sdk client; cancel cascade; "
        "tracing off vs on",
    )
    a2a.add_argument("--events", type=int, default=20_000, help="chunks in the remote stream")
    a2a.add_argument(
        "--delegations", type=int, default=100, help="concurrent delegations in the cancel cascade"
    )
    a2a.add_argument("--repeat", type=int, default=3, help="runs per figure and tracing side")
    mcp = bench_sub.add_parser(
        "mcp",
        help="MCP delegate_to_agent round trip vs a bare mcp server; many runs calling at once",
    )
    mcp.add_argument("--calls", type=int, default=200, help="sequential calls per round-trip run")
    mcp.add_argument("--runs", type=int, default=300, help="runs open and calling at once")
    mcp.add_argument("--repeat", type=int, default=1, help="runs per figure")
    sse = bench_sub.add_parser(
        "sse",
        help="one SSE viewer's events/s vs a raw ASGI app; latency under load; a slow viewer; "
        "tracing off vs on",
    )
    sse.add_argument("--events", type=int, default=100_000, help="events in the throughput run")
    sse.add_argument(
        "--delegations", type=int, default=100, help="concurrent delegations for latency"
    )
    sse.add_argument("--rate", type=float, default=5_000, help="text deltas/s, all delegations")
    sse.add_argument("--seconds", type=float, default=3.0, help="how long the delegations stream")
    sse.add_argument(
        "--repeat", type=int, default=3, help="throughput and latency runs per tracing side"
    )
    scale = bench_sub.add_parser(
        "scale",
        help="memory per delegation and viewer; the whole path as delegations grow; cancel cascade",
    )
    scale.add_argument(
        "--quick",
        action="store_true",
        help="small sizes, one run per step (a smoke run, well under a minute)",
    )
    scale.add_argument(
        "--sizes", help="comma-separated delegation counts for memory (default: 100,1000,5000)"
    )
    scale.add_argument(
        "--steps",
        help="comma-separated delegation counts for the whole path (default: 1,10,100,1000)",
    )
    scale.add_argument(
        "--cascade", help="comma-separated delegation counts to cancel at once (default: 100,1000)"
    )
    scale.add_argument("--chunks", type=int, help="text chunks per delegation (default: 100)")
    scale.add_argument(
        "--repeat", type=int, help="runs per path step and cascade (default: 3; --quick: 1)"
    )
    scale.add_argument(
        "--plot",
        metavar="FILE",
        help="the PNG of cost against delegations (default: the temp dir's "
        "subagent-engine-bench-scale.png)",
    )
    scale.add_argument("--no-plot", action="store_true", help="write no PNG")
    store = bench_sub.add_parser(
        "store",
        help="run stores (memory, SQLite, Redis) vs their raw clients: appends with fan-out, "
        "a non-owner viewer's latency, resume, idle viewers",
    )
    store.add_argument(
        "--quick", action="store_true", help="small sizes, one run each (a smoke run, seconds)"
    )
    store.add_argument("--stores", default="memory,sqlite,redis", help="comma-separated stores")
    store.add_argument("--events", type=int, help="events per append run (default: 20,000)")
    store.add_argument("--subscribers", type=int, help="live subscribers (default: 4)")
    store.add_argument("--repeat", type=int, help="append runs per figure (default: 3)")
    store.add_argument("--rate", type=float, help="events/s the owner writes (default: 5,000)")
    store.add_argument("--seconds", type=float, help="how long it writes (default: 3)")
    store.add_argument("--resume-events", type=int, help="events to resume (default: 100,000)")
    store.add_argument("--viewers", type=int, help="idle viewers (default: 1,000)")

    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.bench == "journal":
        from tools.bench.journal import bench_journal

        counts = [int(c) for c in str(args.subscribers).split(",") if c.strip()]
        return int(bench_journal(events=args.events, subscriber_counts=counts, repeat=args.repeat))
    if args.bench == "a2a":
        from tools.bench.a2a import bench_a2a

        return bench_a2a(events=args.events, delegations=args.delegations, repeat=args.repeat)
    if args.bench == "mcp":
        from tools.bench.mcp import bench_mcp

        return bench_mcp(calls=args.calls, runs=args.runs, repeat=args.repeat)
    if args.bench == "sse":
        from tools.bench.sse import bench_sse

        return bench_sse(
            events=args.events,
            delegations=args.delegations,
            rate=args.rate,
            seconds=args.seconds,
            repeat=args.repeat,
        )
    if args.bench == "scale":
        return _bench_scale(args)
    if args.bench == "store":
        return _bench_store(args)
    raise AssertionError(f"unhandled bench {args.bench!r}")


def _bench_scale(args: argparse.Namespace) -> int:
    from tools.bench import scale

    def counts(raw: str | None, full: tuple[int, ...], quick: tuple[int, ...]) -> list[int]:
        if raw is None:
            return list(quick if args.quick else full)
        return [int(c) for c in raw.split(",") if c.strip()]

    chunks = args.chunks
    if chunks is None:
        chunks = scale.QUICK_CHUNKS if args.quick else scale.CHUNKS
    repeat = args.repeat
    if repeat is None:
        repeat = 1 if args.quick else 3
    return scale.bench_scale(
        sizes=counts(args.sizes, scale.SIZES, scale.QUICK_SIZES),
        steps=counts(args.steps, scale.STEPS, scale.QUICK_STEPS),
        cascade=counts(args.cascade, scale.CASCADE, scale.QUICK_CASCADE),
        chunks=chunks,
        repeat=repeat,
        short_step_runs=1 if args.quick else scale.SHORT_STEP_RUNS,
        plot=None if args.no_plot else (args.plot or scale.PLOT_DEFAULT),
    )


def _bench_store(args: argparse.Namespace) -> int:
    import attrs

    from tools.bench import store

    given = {
        name: getattr(args, name)
        for name in attrs.fields_dict(store.StoreBenchSizes)
        if getattr(args, name) is not None
    }
    try:
        sizes = attrs.evolve(store.QUICK if args.quick else store.FULL, **given)
    except ValueError as exc:
        print(f"bench store: {exc}", file=sys.stderr)
        return 2
    names = [name.strip() for name in str(args.stores).split(",") if name.strip()]
    return store.bench_store(sizes, stores=names)


if __name__ == "__main__":
    sys.exit(main())
