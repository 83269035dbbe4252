"""The object layer every process has: ids, serialization, reference counts, the object table
and its store (in memory, in shared memory for workers on the same host, spilled to disk)."""
