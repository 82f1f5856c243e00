"""Test kits for what plugs into the engine, like `trio.testing` for Trio.

Needs hypothesis: install the `testing` extra (`pip install subagent-engine[testing]`).

- `check_journal_store(factory)`: does a `JournalStore` follow the store contract?
  (`check_journal_store_sync` outside Trio.)
- `check_target(harness)`: does a `Target` follow the target seam's contract? A harness says how
  to make its remote play each `Scenario`; each part of the contract is a check of its own
  (`TARGET_CHECKS`: `check_prepare`, `check_start_and_stream`, `check_cancel`, ...).
"""

from engine.testing._store_kit import (
    JournalStoreContractError,
    StoreFactory,
    check_journal_store,
    check_journal_store_sync,
)
from engine.testing._target_kit import (
    TARGET_CHECKS,
    Scenario,
    TargetContractError,
    TargetHarness,
    check_answer,
    check_cancel,
    check_close,
    check_prepare,
    check_resubscribe,
    check_start_and_stream,
    check_target,
)

__all__ = [
    "TARGET_CHECKS",
    "JournalStoreContractError",
    "Scenario",
    "StoreFactory",
    "TargetContractError",
    "TargetHarness",
    "check_answer",
    "check_cancel",
    "check_close",
    "check_journal_store",
    "check_journal_store_sync",
    "check_prepare",
    "check_resubscribe",
    "check_start_and_stream",
    "check_target",
]
