"""Benchmarks behind `weaveplace bench ...`: one module per benchmark; they may import every layer."""
