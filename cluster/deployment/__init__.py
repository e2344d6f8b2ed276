"""A deployed plan: actors, recovery, membership, pinning, drills."""
