"""`ray.experimental`: `ray.experimental.queue` (Ray's old path of `ray.util.queue`) and
`ray.experimental.tqdm_ray` (progress bars from tasks).

Ray's experimental APIs (compiled graphs, channels, tensor transports, internal KV, ...) have
no counterpart; importing one raises ImportError saying so (see `fray_ray._module_map`).
"""
