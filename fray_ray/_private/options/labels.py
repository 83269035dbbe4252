"""Checks of `label_selector` and `fallback_strategy`: Kubernetes-style label keys and values.

>>> label_selector("label_selector", {"ray.io/market-type": "in(spot,on-demand)"}, Context())
>>> label_selector("label_selector", {"a": "bad value"}, Context())
Traceback (most recent call last):
...
ValueError: Invalid label selector value `bad value`. ...
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from fray_ray._private.options.model import Context

# Label names and values: at most 63 characters, alphanumeric at both ends, [-_.] inside.
_LABEL_NAME: Final = re.compile(r"[a-zA-Z0-9]([-_.a-zA-Z0-9]{0,61}[a-zA-Z0-9])?")
_LABEL_RULE: Final = (
    "must be 63 chars or less beginning and ending with an alphanumeric character "
    "([a-z0-9A-Z]) with dashes (-), underscores (_),dots (.), and alphanumerics between."
)
_IN_OPERATOR: Final = re.compile(r"in\((.*)\)")


def _check_label_key(key: object) -> None:
    if not isinstance(key, str):
        raise TypeError(f"Label selector keys must be strings, got {key!r} of type {type(key)}")
    prefix, _, name = key.rpartition("/")
    if "/" in key and (
        len(prefix) > 253 or not all(_LABEL_NAME.fullmatch(part) for part in prefix.split("."))
    ):
        raise ValueError(
            f"Invalid label key prefix `{prefix}`. Prefix must be a series of DNS labels "
            "separated by dots (.), not longer than 253 characters in total."
        )
    if not _LABEL_NAME.fullmatch(name):
        raise ValueError(f"Invalid label key name `{name}`. Name {_LABEL_RULE}")


def _check_label_value(raw: object) -> None:
    if not isinstance(raw, str):
        raise TypeError(
            f"Label selector values must be strings, got {raw!r} of type {type(raw)}"
        )
    if raw == "":
        return
    body = raw[1:] if raw.startswith("!") else raw
    operator = _IN_OPERATOR.fullmatch(body)
    values = [v.strip() for v in operator.group(1).split(",")] if operator else [body]
    if not all(_LABEL_NAME.fullmatch(v) for v in values):
        raise ValueError(
            f"Invalid label selector value `{raw}`. The label selector value should contain "
            "optional operators and a label value. Supported operators are: ! and {'in'}. "
            f"Value {_LABEL_RULE}"
        )


def label_selector(key: str, value: Any, ctx: Context) -> None:
    for label, selector in (value or {}).items():
        _check_label_key(label)
        _check_label_value(selector)


def fallback_strategy(key: str, value: Any, ctx: Context) -> None:
    for entry in value or ():
        if not isinstance(entry, Mapping):
            raise ValueError("Each element in fallback_strategy must be a dictionary.")
        for option, setting in entry.items():
            if option != "label_selector":
                raise ValueError(
                    f"Unsupported option found: '{option}'. Only ['label_selector'] is "
                    "currently supported."
                )
            if not isinstance(setting, Mapping):
                raise ValueError('The value of "label_selector" must be a dictionary.')
            label_selector(option, setting, ctx)
