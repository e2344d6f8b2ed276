"""Runs end to end over a file or a directory, owning their runtimes."""
