"""Internals of the Ray layer: wire protocol, serialization, object table, scheduler, workers."""
