"""Arrow operator kernels: the vectorized code that runs inside Spark's Python workers."""
