"""The leaf of Sluice's layers: what the runtime (the data plane) and the control plane both
read and write, with no Spark and no import of any other Sluice package except ``errors`` and
``credentials``: the checkpoint and its file I/O, the metrics record, resources.

``docs/architecture.md`` draws the layers; ``tests/architecture/test_architecture.py`` checks them."""
