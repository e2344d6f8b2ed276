"""Answers as blocks, as Parquet parts written atomically, and run files."""
