"""Sources that feed a deployment: Parquet, sliced, text, executor tasks, directory."""
