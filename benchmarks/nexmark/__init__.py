"""Nexmark on Sluice and Spark Structured Streaming, checked against DuckDB (``run``)."""
