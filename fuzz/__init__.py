"""Fuzzing of everything that reads outside input, run from a checkout.

`python -m fuzz` runs each `fuzz_<name>.py` harness (a parser or mapper of the product, fed
arbitrary bytes; only its documented typed error may escape) in its own process for a bounded
time; `python -m fuzz.listeners` throws raw request bytes at the HTTP listeners run as processes
and checks that each stays up and well-behaved. Nothing here is installed.
"""
