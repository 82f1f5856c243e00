"""The soak tier: many runs with random faults, then an exact accounting (tools.soak)."""
