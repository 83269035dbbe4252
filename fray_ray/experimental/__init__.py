"""`ray.experimental`: only `ray.experimental.queue` (Ray's old path of `ray.util.queue`).

Ray's experimental APIs (compiled graphs, channels, tensor transports, internal KV, ...) have
no counterpart; importing one raises ImportError saying so (see `fray_ray._module_map`).
"""
