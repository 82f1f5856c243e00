"""The `subagent-engine` command: one console script, one subcommand per job.

This module only parses arguments and dispatches; each job lives in its own module
(`demo`, `cli.run`, `cli.watch`, `cli.serve`, `cli.a2a_serve`, `cli.check_stream`,
`tools.bench.journal`, `tools.bench.a2a`, `tools.bench.mcp`, `tools.bench.scale`, `tools.soak`).
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
            "review (no model, no API key). --parent claude-code|codex and --remote "
            "codex|claude-code use the CLIs against --model-endpoint (claude is claude-code)."
        ),
    )
    demo.add_argument("--host", help="address the page listens on (default: 127.0.0.1)")
    demo.add_argument("--port", type=int, help="the page's port (default: 8080; 0: any)")
    # Parent kinds are checked by the command (`adapters.parents.parent_kind`), not listed here:
    # importing their declaration would import every parent adapter to parse arguments.
    demo.add_argument(
        "--parent",
        metavar="KIND",
        help="what drives each run: scripted (the default, no model), claude-code (or claude), "
        "codex",
    )
    demo.add_argument(
        "--remote",
        metavar="KIND",
        help="the remote A2A agents: builtin (the default: research and review, no model), "
        "codex, claude-code (or claude)",
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
    demo.add_argument(
        "--log-format",
        choices=("text", "json"),
        help="log lines on stderr: text or json (JSON Lines) (default: text; with --print, "
        "none unless given)",
    )
    demo.add_argument(
        "--access-log",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="one log line per HTTP request to the page (default: off)",
    )

    run = sub.add_parser(
        "run",
        help="run one prompt in the terminal and draw its subagents live as a tree",
        description=(
            "Run one prompt with the configured parent (scripted, claude-code, codex) and its "
            "agents, draw the parent, its tool calls and each subagent live as a tree (redrawn "
            "in place on a terminal, appended plain lines otherwise or with NO_COLOR), then print "
            "the result. Exit status: 0 finished, 1 the run or a subagent failed, 2 bad options or "
            "configuration, "
            "3 cancelled, 130 interrupted by Ctrl-C (the run and its remote tasks cancelled)."
        ),
    )
    run.add_argument("prompt", metavar="PROMPT", help="what the parent is asked")
    run.add_argument(
        "--config",
        metavar="FILE",
        help="host configuration (TOML): [parent], [[agents]]; default: embedded demo "
        "(the scripted parent and two in-process agents)",
    )
    run.add_argument(
        "--parent",
        metavar="KIND",
        help="the parent: scripted, claude-code (or claude), codex (default: the config's "
        "[parent] kind; a CLI takes its model settings from [parent])",
    )

    watch = sub.add_parser(
        "watch",
        help="draw any run's stream live as a tree, by its URL and viewer token",
        description=(
            "Watch a run another process serves (subagent-engine serve, demo): its parent, tool "
            "calls and subagents drawn live as a tree, as `run` draws them, until the run ends. "
            "URL: the run's events URL (.../runs/<id>/events, what POST /runs answers), its run "
            "URL (.../runs/<id>) or the page's link (.../#run=<id>&token=<token>). A dropped "
            "connection is reopened from the last event (Last-Event-ID, at most 5 times in a "
            "row). Exit status: 0 finished, 1 the run or a subagent failed, 2 bad URL or no "
            "token, 3 cancelled, 4 token refused (401/403), 5 no such run or not its token "
            "(404), 6 server unreachable or the stream lost, 7 not a run's stream, 130 Ctrl-C "
            "(the run goes on)."
        ),
    )
    watch.add_argument("url", metavar="URL", help="the run's events URL, run URL or page link")
    watch.add_argument(
        "--token",
        metavar="TOKEN",
        help="the run's viewer token (default: the URL's token, else $SUBAGENT_ENGINE_TOKEN)",
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
    serve.add_argument(
        "--log-format",
        choices=("text", "json"),
        help="log lines on stderr: text or json (JSON Lines) (default: the config's [logging] "
        "format, text)",
    )
    serve.add_argument(
        "--access-log",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="one log line per HTTP request (default: the config's [logging] access_log, off)",
    )

    a2a_serve = sub.add_parser(
        "a2a-serve",
        help="serve a parent agent (scripted, claude-code, codex) as an A2A 1.0 agent",
    )
    a2a_serve.add_argument(
        "--parent",
        metavar="KIND",
        help="the parent agent to serve: scripted, claude-code (or claude), codex (default: the "
        "config's [parent] kind, else scripted); or conformance: no parent, the A2A conformance "
        "suite's scripted agent (messageId prefixes; ./dev tck)",
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
        choices=("reply", "slow", "ask", "research", "review"),
        default="reply",
        help="the scripted parent's script (reply: a short answer; slow: ~15 s of text; ask: "
        "asks the sender one question (input-required) and answers with the reply; research, "
        "review: the demo's remotes)",
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
        "--ask-timeout",
        type=float,
        default=600.0,
        metavar="SECONDS",
        help="how long the served parent's ask_requester question waits for its answer (the "
        "follow-up message on the input-required task) before it goes on without one",
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

    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "demo":
        return _demo(args)
    if args.command == "run":
        from cli.run import run_main

        return run_main(args.prompt, config_path=args.config, parent=args.parent)
    if args.command == "watch":
        from cli.watch import watch_main

        return watch_main(args.url, token=args.token)
    if args.command == "serve":
        from cli.serve import serve_main

        return serve_main(
            args.config,
            host=args.host,
            port=args.port,
            token_env=args.token_env,
            log_format=args.log_format,
            access_log=args.access_log,
        )
    if args.command == "a2a-serve":
        from cli.a2a_serve import a2a_serve_main

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
            ask_timeout=args.ask_timeout,
            watch_stdin=args.watch_stdin,
            token_env=args.token_env,
        )
    if args.command == "check-stream":
        from cli.check_stream import check_stream_main

        return check_stream_main(args.file)
    raise AssertionError(f"unhandled command {args.command!r}")


def _demo(args: argparse.Namespace) -> int:
    from demo import DemoOptions, demo_main, run_demo

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
                f"subagent-engine demo: --print runs in the terminal: no {flags} (to run a "
                "parent and remote agents in the terminal: subagent-engine run --parent KIND "
                "--config host.toml PROMPT)",
                file=sys.stderr,
            )
            return 2
        if args.access_log:
            print(
                "subagent-engine demo: --access-log logs the page's requests; --print serves no "
                "page",
                file=sys.stderr,
            )
            return 2
        return run_demo(as_json=args.json, fast=args.fast, log_format=args.log_format)
    if args.json or args.fast:
        print("subagent-engine demo: --json and --fast go with --print", file=sys.stderr)
        return 2
    logs = {"log_format": args.log_format, "access_log": args.access_log}
    given.update((key, value) for key, value in logs.items() if value is not None)
    return demo_main(DemoOptions(**given))


if __name__ == "__main__":
    sys.exit(main())
