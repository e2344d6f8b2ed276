"""Starting or attaching to the runtimes a deployment runs on: Ray and Spark."""
