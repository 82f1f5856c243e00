"""Test kits for what plugs into the engine, like `trio.testing` for Trio.

Needs hypothesis: install the `testing` extra (`pip install subagent-engine[testing]`).

- `check_journal_store(factory)`: does a `JournalStore` follow the store contract?
  (`check_journal_store_sync` outside Trio.)
"""

from engine.testing._store_kit import (
    JournalStoreContractError,
    StoreFactory,
    check_journal_store,
    check_journal_store_sync,
)

__all__ = [
    "JournalStoreContractError",
    "StoreFactory",
    "check_journal_store",
    "check_journal_store_sync",
]
