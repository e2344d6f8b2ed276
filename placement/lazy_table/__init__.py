"""WeaveShare's lazy cost lookup table for additive Omega (table) and its numba rows (kernels)."""
