"""Option values: non-finite, negative and out-of-range numbers in ``@remote`` / ``.options()``.

Ray 2.60 rejects a NaN resource quantity with ValueError and an infinite one with OverflowError
(both when the decorator or ``.options()`` is applied), a negative one with ValueError; integer
options it hands to C as 64-bit numbers raise OverflowError at ``.remote()``; an actor method's
``num_returns`` and ``max_task_retries`` are checked at ``.remote()``.
"""

from __future__ import annotations

import pytest

from compat_tests._backend import exceptions, ray

_NAN = float("nan")
_INF = float("inf")
_HUGE = 2**70  # does not fit a C long


def _function():
    return 1


class _Plain:
    def method(self):
        return 1

    def pair(self):
        return 1, 2


def _decorate(target):
    return lambda **options: ray.remote(**options)(target)


def _options_of(target):
    return lambda **options: ray.remote(target).options(**options)


_APPLY = {
    "function-decorator": _decorate(_function),
    "function-options": _options_of(_function),
    "class-decorator": _decorate(_Plain),
    "class-options": _options_of(_Plain),
}


def _quantity(key, value):
    return {"resources": {"custom": value}} if key == "resources" else {key: value}


@pytest.mark.parametrize("where", sorted(_APPLY))
@pytest.mark.parametrize("key", ["num_cpus", "num_gpus", "memory", "resources"])
@pytest.mark.parametrize(
    ("value", "error", "words"),
    [
        (_NAN, ValueError, "cannot convert float NaN to integer"),
        (_INF, OverflowError, "cannot convert float infinity to integer"),
        (-1, ValueError, "cannot be negative"),
        (-_INF, ValueError, "cannot be negative"),
    ],
    ids=["nan", "inf", "negative", "minus-inf"],
)
def test_option_values__bad_quantity_is_rejected(where, key, value, error, words):
    with pytest.raises(error, match=words):
        _APPLY[where](**_quantity(key, value))


@pytest.mark.parametrize("where", sorted(_APPLY))
def test_option_values__large_finite_quantity_is_accepted_when_declared(where):
    # Feasibility is the scheduler's business, not the decorator's.
    _APPLY[where](num_cpus=1e9)


@pytest.mark.parametrize("where", ["function-decorator", "function-options"])
@pytest.mark.parametrize("value", [_NAN, 1.0], ids=["nan", "float"])
def test_option_values__max_retries_must_be_an_int(where, value):
    with pytest.raises(TypeError, match="max_retries"):
        _APPLY[where](max_retries=value)


@pytest.mark.parametrize("where", ["class-decorator", "class-options"])
@pytest.mark.parametrize("key", ["max_restarts", "max_task_retries", "max_concurrency"])
def test_option_values__actor_counts_must_be_ints(where, key):
    with pytest.raises(TypeError, match=key):
        _APPLY[where](**{key: _NAN})


@pytest.mark.parametrize("key", ["max_restarts", "max_task_retries", "max_pending_calls"])
def test_option_values__actor_counts_below_minus_one_are_rejected(key):
    with pytest.raises(ValueError, match=f"The keyword '{key}' only accepts None, 0, -1 or a positive integer"):
        ray.remote(**{key: -2})(_Plain)


def test_option_values__max_calls_cannot_be_set_in_options():
    with pytest.raises(ValueError, match="Setting 'max_calls' is not supported in '.options\\(\\)'"):
        ray.remote(_function).options(max_calls=1)


@pytest.mark.parametrize("key", ["max_retries", "num_returns"])
def test_option_values__task_count_beyond_64_bits_overflows_at_remote(ray_start_regular_shared, key):
    with pytest.raises(OverflowError):
        ray.remote(_function).options(**{key: _HUGE}).remote()


@pytest.mark.parametrize("key", ["max_task_retries", "max_concurrency", "max_pending_calls"])
def test_option_values__actor_count_beyond_64_bits_overflows_at_remote(ray_start_regular_shared, key):
    with pytest.raises(OverflowError):
        ray.remote(_Plain).options(**{key: _HUGE}).remote()


@pytest.mark.parametrize(
    ("options", "error", "words"),
    [
        ({"num_returns": _NAN}, ValueError, "cannot convert float NaN to integer"),
        ({"num_returns": _INF}, OverflowError, "cannot convert float infinity to integer"),
        ({"num_returns": _HUGE}, OverflowError, None),
        ({"max_task_retries": _NAN}, ValueError, "cannot convert float NaN to integer"),
        ({"max_task_retries": _INF}, OverflowError, "cannot convert float infinity to integer"),
        ({"max_task_retries": _HUGE}, OverflowError, None),
    ],
    ids=["returns-nan", "returns-inf", "returns-huge", "retries-nan", "retries-inf",
         "retries-huge"],
)
def test_option_values__bad_method_option_fails_at_remote(ray_start_regular_shared, options, error, words):
    handle = ray.remote(_Plain).remote()
    method = handle.pair.options(**options)  # accepted here; checked when the call is made
    with pytest.raises(error, match=words):
        method.remote()
    assert ray.get(handle.method.remote()) == 1  # the actor is unharmed


def test_option_values__negative_method_num_returns_fails_at_options(ray_start_regular_shared):
    handle = ray.remote(_Plain).remote()
    with pytest.raises(ValueError, match="num_returns must be >= 0, but got -1"):
        handle.pair.options(num_returns=-1)


def test_option_values__method_num_returns_is_read_as_an_integer(ray_start_regular_shared):
    handle = ray.remote(_Plain).remote()
    assert ray.get(handle.pair.options(num_returns=2.0).remote()) == [1, 2]


@pytest.mark.known_difference(
    reason="an actor that asks for more than the cluster will ever have fails at once: its calls "
    "raise ActorUnschedulableError naming the resource; Ray leaves it pending forever with a warning"
)
def test_option_values__infeasible_actor_stays_pending(ray_start_regular_shared):
    handle = ray.remote(num_cpus=1e9)(_Plain).remote()
    with pytest.raises(exceptions.GetTimeoutError):
        ray.get(handle.method.remote(), timeout=1)
    ray.kill(handle)
