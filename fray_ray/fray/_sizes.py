"""Byte sizes as users write them ("4g", "512M", "1.5GiB") and back.

Re-exported by `fray_ray.fray.types`, where users find them.
"""

from __future__ import annotations

import re

__all__ = ["format_bytes", "parse_bytes"]

_UNITS: tuple[tuple[str, int], ...] = (("t", 1024**4), ("g", 1024**3), ("m", 1024**2), ("k", 1024))
_SIZE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([kmgtKMGT]?)(?:[iI]?[bB])?\s*$")


def parse_bytes(size: str | int) -> int:
    """Bytes in a size such as `"4g"`, `"512M"`, `"1.5GiB"` or `1024` (binary units).

    Returns the byte count; raises ValueError for anything else.
    """
    if isinstance(size, bool):
        raise ValueError(f"not a byte size: {size!r}")
    if isinstance(size, int):
        if size < 0:
            raise ValueError(f"a byte size cannot be negative: {size!r}")
        return size
    match = _SIZE.match(size) if isinstance(size, str) else None
    if match is None:
        raise ValueError(f"not a byte size: {size!r}; write a number with an optional k/m/g/t suffix, e.g. '4g'")
    number, suffix = match.groups()
    unit = dict(_UNITS).get(suffix.lower(), 1)
    return int(round(float(number) * unit))


def format_bytes(n: int) -> str:
    """The most compact suffix form of `n` bytes: `format_bytes(8 * 1024**3) == "8g"`.

    Uses the largest unit that divides `n` exactly; otherwise the largest unit not above `n`
    with up to three decimals (`"1.2g"`).
    """
    for suffix, unit in _UNITS:
        if n >= unit and n % unit == 0:
            return f"{n // unit}{suffix}"
    for suffix, unit in _UNITS:
        if n >= unit:
            return f"{n / unit:.3f}".rstrip("0").rstrip(".") + suffix
    return str(n)
