"""Developer tools run from a checkout, never installed or imported by the product.

`bench` (`python -m tools.bench ...`) measures the engine beside this machine's own limits,
`soak` (`python -m tools.soak`) runs many faulty runs at once and accounts for every event,
`peers` holds the servers tests, benchmarks and the soak start as remote agents, and `imports`
prints the import graph the layer test checks.
"""
