"""placement package."""
