"""The official A2A conformance suite (the TCK) run against `subagent-engine a2a-serve`.

`tck.sh` starts `a2a-serve --parent conformance` (`adapters.a2a.conformance`) and runs the suite
vendored in `third_party/a2a-tck` over JSON-RPC and HTTP+JSON with `run.sh`; `./dev tck` runs it
alone and `./dev test` beside pytest. `tck_loopback.py` is the pytest plugin `run.sh` loads into
the suite; the waiver file lists the MUST failures known to come from a2a-sdk 1.3.0.
"""
