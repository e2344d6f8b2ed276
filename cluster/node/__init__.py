"""One plan node: its execution trees, ingest, answers, snapshots (no driver state)."""
