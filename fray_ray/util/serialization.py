"""`ray.util.serialization`: custom serializers for types that cannot be pickled.

>>> import threading
>>> register_serializer(type(threading.Lock()), serializer=lambda lock: None,
...                     deserializer=lambda _: threading.Lock())  # doctest: +SKIP
"""

from fray_ray.util._serialization import deregister_serializer, register_serializer

__all__ = ["deregister_serializer", "register_serializer"]
