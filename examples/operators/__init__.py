"""The paper's benchmark tasks (Shukla and Simmhan, Sec. 5.2) as Sluice operators.

Each operator is a class with ``setup()`` (once per worker process), a thread-safe
``process(key) -> object`` called once per tuple by one of the task's tau worker threads, and
``close()``. ``sluice.runtime.profiler`` loads them by file path (``examples/operators/pi.py:Pi``)
so Spark's Python workers can import them without this directory being a package on their path.

| operator | paper task | resource |
|---|---|---|
| parse_xml.ParseXml | Parse XML (SAX over an in-memory document) | CPU, memory |
| pi.Pi | Pi Computation (Viete, 15 iterations) | CPU |
| batch_file_write.BatchFileWrite | Batch File Write (100 bytes per tuple, a file per 10,000) | disk |
| table_lookup.TableLookup | Azure Table query -> PostgreSQL point lookup in 2,000,000 rows | external service |
| blob_fetch.BlobFetch | Azure Blob download -> 2 MB object from a local HTTP server | network, memory |
"""
