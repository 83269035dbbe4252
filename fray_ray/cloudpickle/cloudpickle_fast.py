"""`ray.cloudpickle.cloudpickle_fast`: the legacy module name cloudpickle still answers to."""

from cloudpickle.cloudpickle import CloudPickler, dump, dumps  # noqa: F401

__all__ = ["CloudPickler", "dump", "dumps"]
