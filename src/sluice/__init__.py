"""Sluice: QoS-driven, self-adapting stream processing on Apache Spark."""

from sluice.errors import SluiceError

__version__ = "0.1.0"

__all__ = ["SluiceError", "__version__"]
