"""The hidden columns Sluice adds to a stream's rows, each named once: the source, the graph's
validation, the exchange, the kernels and the key-group store all read these names."""

INGEST = "__ingest_ts"
"""When the record became available at the source (timestamp, microseconds); sinks measure
end-to-end latency from it."""

KEY_GROUP = "__kg"
"""A keyed row's key group (int32): a stable hash of its key modulo the max parallelism."""

PARTITION = "__part"
"""The partition the plan's routing table sends a row's key group to."""

SOURCE_ID = "__src"
"""Which source a row came from, when one query reads several."""
