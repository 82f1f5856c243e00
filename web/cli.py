"""The `subagent-engine` command: one console script, one subcommand per job.

This module only parses arguments and dispatches; each job lives in its own module
(`web.demo`, `web.serve`, `web.a2a_serve`, `web.check_stream`, `web.bench`, `web.bench_a2a`,
`web.bench_mcp`, `web.bench_scale`, `web.soak`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="subagent-engine",
        description="Delegate to remote agents and stream them as nested subagents.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    demo = sub.add_parser(
        "demo",
        help="serve the page: a parent delegating to remote A2A subagents (no API key)",
        description=(
            "Serve the page with a parent agent that delegates to remote A2A agents run by "
            "a2a-serve. Default: the scripted parent and two built-in remotes, research and "
            "review (no model, no API key). --parent claude|codex and --remote codex|claude "
            "use the CLIs against --model-endpoint."
        ),
    )
    demo.add_argument("--host", help="address the page listens on (default: 127.0.0.1)")
    demo.add_argument("--port", type=int, help="the page's port (default: 8080; 0: any)")
    demo.add_argument(
        "--parent",
        choices=("scripted", "claude", "codex"),
        help="what drives each run (default: scripted, no model)",
    )
    demo.add_argument(
        "--remote",
        choices=("builtin", "codex", "claude"),
        help="the remote A2A agents (default: builtin, research and review, no model)",
    )
    demo.add_argument(
        "--model-endpoint",
        metavar="URL",
        help="the model server's base URL for the CLIs (Claude Code: as is; Codex: URL/v1)",
    )
    demo.add_argument("--model", metavar="NAME", help="the model name the CLIs ask for")
    demo.add_argument(
        "--api-key-env",
        metavar="VAR",
        help="the variable holding the endpoint's API key (default: the CLI's own)",
    )
    demo.add_argument(
        "--binary-dir",
        metavar="DIR",
        help="where the claude and codex binaries are (default: PATH)",
    )
    demo.add_argument(
        "--print",
        action="store_true",
        help="no page: run once with two in-process subagents and print the event stream",
    )
    demo.add_argument("--json", action="store_true", help="with --print: one JSON line per entry")
    demo.add_argument(
        "--fast", action="store_true", help="with --print: no pauses between chunks (tests, CI)"
    )

    serve = sub.add_parser(
        "serve", help="serve runs over AG-UI (SSE, WebSocket) with the browser page"
    )
    serve.add_argument(
        "--config", metavar="FILE", help="host configuration (TOML); default: embedded demo"
    )
    serve.add_argument("--host", help="address to listen on (default: the config's, 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port (default: the config's, 8080; 0: any)")
    serve.add_argument(
        "--token-env",
        metavar="NAME",
        help="starting a run needs 'Authorization: Bearer <the value of NAME>' "
        "(required to listen beyond loopback; default: the config's [server] token_env)",
    )

    a2a_serve = sub.add_parser(
        "a2a-serve",
        help="serve a parent agent (scripted, claude-code, codex) as an A2A 1.0 agent",
    )
    a2a_serve.add_argument(
        "--parent",
        choices=("scripted", "claude-code", "codex"),
        help="the parent agent to serve (default: the config's [parent] kind, else scripted)",
    )
    a2a_serve.add_argument(
        "--config",
        metavar="FILE",
        help="host configuration (TOML): [parent] model settings, [[agents]] it may delegate to",
    )
    a2a_serve.add_argument(
        "--host",
        help="address to listen on (default: the config's, 127.0.0.1; beyond loopback, "
        "--token-env is required)",
    )
    a2a_serve.add_argument("--port", type=int, help="port (default: 0, any free port)")
    a2a_serve.add_argument("--name", help="the agent card's name")
    a2a_serve.add_argument("--description", help="the agent card's description")
    a2a_serve.add_argument(
        "--skill",
        action="append",
        default=[],
        metavar="NAME[=DESCRIPTION]",
        help="a skill the card advertises (repeatable; default: one named after the agent)",
    )
    a2a_serve.add_argument(
        "--script",
        choices=("reply", "slow", "research", "review"),
        default="reply",
        help="the scripted parent's script (reply: a short answer; slow: ~15 s of text; "
        "research, review: the demo's remotes)",
    )
    a2a_serve.add_argument("--binary", help="the CLI binary of a claude-code or codex parent")
    a2a_serve.add_argument("--public-url", help="the base URL the card advertises (proxies)")
    a2a_serve.add_argument(
        "--cancel-grace",
        type=float,
        default=4.0,
        metavar="SECONDS",
        help="how long CancelTask waits for the parent to stop before it answers canceled",
    )
    a2a_serve.add_argument(
        "--token-env",
        metavar="NAME",
        help="require 'Authorization: Bearer <the value of NAME>' on every call but the card's "
        "(a token of 16 characters or more; required to listen beyond loopback)",
    )
    a2a_serve.add_argument(
        "--watch-stdin", action="store_true", help="exit when stdin closes (child processes)"
    )

    check = sub.add_parser(
        "check-stream",
        help="check a captured AG-UI SSE stream against the AG-UI verifier rules",
    )
    check.add_argument("file", metavar="FILE", help="the captured stream, or - for stdin")

    bench = sub.add_parser("bench", help="micro-benchmarks, printed beside this machine's limits")
    bench_sub = bench.add_subparsers(dest="bench", required=True, metavar="BENCH")
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
        help="A2A stream events/s through the engine vs a bare a2a-sdk client; cancel cascade",
    )
    a2a.add_argument("--events", type=int, default=20_000, help="chunks in the remote stream")
    a2a.add_argument(
        "--delegations", type=int, default=100, help="concurrent delegations in the cancel cascade"
    )
    a2a.add_argument("--repeat", type=int, default=3, help="runs per figure")
    mcp = bench_sub.add_parser(
        "mcp",
        help="MCP delegate_to_agent round trip vs a bare mcp server; many runs calling at once",
    )
    mcp.add_argument("--calls", type=int, default=200, help="sequential calls per round-trip run")
    mcp.add_argument("--runs", type=int, default=300, help="runs open and calling at once")
    mcp.add_argument("--repeat", type=int, default=1, help="runs per figure")
    sse = bench_sub.add_parser(
        "sse",
        help="one SSE viewer's events/s vs a raw ASGI app; latency under load; a slow viewer",
    )
    sse.add_argument("--events", type=int, default=100_000, help="events in the throughput run")
    sse.add_argument(
        "--delegations", type=int, default=100, help="concurrent delegations for latency"
    )
    sse.add_argument("--rate", type=float, default=5_000, help="text deltas/s, all delegations")
    sse.add_argument("--seconds", type=float, default=3.0, help="how long the delegations stream")
    sse.add_argument("--repeat", type=int, default=3, help="throughput runs (median kept)")
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

    soak = sub.add_parser(
        "soak",
        help="many runs with random remote faults, cancels and reconnecting viewers; "
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
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "demo":
        return _demo(args)
    if args.command == "serve":
        from web.serve import serve_main

        return serve_main(args.config, host=args.host, port=args.port, token_env=args.token_env)
    if args.command == "a2a-serve":
        from web.a2a_serve import a2a_serve_main

        return a2a_serve_main(
            parent=args.parent,
            config_path=args.config,
            host=args.host,
            port=args.port,
            name=args.name,
            description=args.description,
            skills=args.skill,
            script=args.script,
            binary=args.binary,
            public_url=args.public_url,
            cancel_grace=args.cancel_grace,
            watch_stdin=args.watch_stdin,
            token_env=args.token_env,
        )
    if args.command == "check-stream":
        from web.check_stream import check_stream_main

        return check_stream_main(args.file)
    if args.command == "bench" and args.bench == "journal":
        from web.bench import bench_journal

        counts = [int(c) for c in str(args.subscribers).split(",") if c.strip()]
        return int(bench_journal(events=args.events, subscriber_counts=counts, repeat=args.repeat))
    if args.command == "bench" and args.bench == "a2a":
        from web.bench_a2a import bench_a2a

        return bench_a2a(events=args.events, delegations=args.delegations, repeat=args.repeat)
    if args.command == "bench" and args.bench == "mcp":
        from web.bench_mcp import bench_mcp

        return bench_mcp(calls=args.calls, runs=args.runs, repeat=args.repeat)
    if args.command == "bench" and args.bench == "sse":
        from web.bench_sse import bench_sse

        return bench_sse(
            events=args.events,
            delegations=args.delegations,
            rate=args.rate,
            seconds=args.seconds,
            repeat=args.repeat,
        )
    if args.command == "bench" and args.bench == "scale":
        return _bench_scale(args)
    if args.command == "soak":
        from web.soak import soak_main

        minutes = args.minutes if args.minutes is not None or args.total else 1.0
        return soak_main(
            minutes=minutes,
            seed=args.seed,
            runs=args.total,
            concurrency=args.concurrency,
            out=sys.stdout,
        )
    raise AssertionError(f"unhandled command {args.command!r}")


def _bench_scale(args: argparse.Namespace) -> int:
    from web import bench_scale as scale

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


def _demo(args: argparse.Namespace) -> int:
    from web.demo import DemoOptions, demo_main, run_demo

    served = {
        "host": args.host,
        "port": args.port,
        "parent": args.parent,
        "remote": args.remote,
        "model_endpoint": args.model_endpoint,
        "model": args.model,
        "api_key_env": args.api_key_env,
        "binary_dir": args.binary_dir,
    }
    given = {key: value for key, value in served.items() if value is not None}
    if args.print:
        if given:
            flags = ", ".join("--" + key.replace("_", "-") for key in given)
            print(
                f"subagent-engine demo: --print runs in the terminal: no {flags}", file=sys.stderr
            )
            return 2
        return run_demo(as_json=args.json, fast=args.fast)
    if args.json or args.fast:
        print("subagent-engine demo: --json and --fast go with --print", file=sys.stderr)
        return 2
    return demo_main(DemoOptions(**given))


if __name__ == "__main__":
    sys.exit(main())
