"""Remote functions: definition, calling conventions, argument passing and options.

Mirrors Ray's test_basic.py / test_basic_2.py (the name after ``__`` is the Ray test) plus the
argument-passing and option-validation rules of the reference (ray-api.md §1.2, §1.3).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from compat_tests._backend import exceptions, ray
from compat_tests.helpers import Recorder

# --- definition and nesting ---------------------------------------------------------------


def test_basic__nested_functions(ray_start_regular_shared):
    @ray.remote
    def outer(x):
        # ``inner`` is defined after ``outer``; it is looked up when ``outer`` runs.
        return ray.get(inner.remote(x)) + 1

    @ray.remote
    def inner(x):
        return x * 10

    assert ray.get(outer.remote(4)) == 41

    @ray.remote
    def factorial(n):
        if n <= 1:
            return 1
        return n * ray.get(factorial.remote(n - 1))

    assert ray.get(factorial.remote(1)) == 1
    assert ray.get(factorial.remote(4)) == 24


def test_basic__mutually_recursive_functions(ray_start_regular_shared):
    @ray.remote
    def is_even(n):
        return True if n == 0 else ray.get(is_odd.remote(n - 1))

    @ray.remote
    def is_odd(n):
        return False if n == 0 else ray.get(is_even.remote(n - 1))

    assert ray.get(is_even.remote(0)) is True
    assert ray.get(is_odd.remote(3)) is True
    assert ray.get(is_even.remote(3)) is False


def test_basic__nonascii_in_function_body(ray_start_regular_shared):
    @ray.remote
    def greet(name):
        # Non-ASCII in the source and in the result: ünïcödé ✓ 日本語
        return f"¡Hola, {name}! ✓ 日本語"

    assert ray.get(greet.remote("Zoë")) == "¡Hola, Zoë! ✓ 日本語"


def test_basic_2__defining_remote_functions(ray_start_regular_shared):
    data = np.arange(12).reshape(3, 4)

    @ray.remote
    def total():
        return int(data.sum())  # closes over a numpy array

    @ray.remote
    def root(x):
        return math.sqrt(x)  # uses a module imported by the test module

    @ray.remote
    def array_of(n):
        return np.ones(n)

    @ray.remote
    def chained(x):
        # a task calling tasks
        return ray.get(root.remote(x)) + ray.get(total.remote())

    assert ray.get(total.remote()) == 66
    assert ray.get(root.remote(16)) == 4.0
    np.testing.assert_array_equal(ray.get(array_of.remote(3)), np.ones(3))
    assert ray.get(chained.remote(9)) == 69.0


def test_basic_2__redefining_remote_functions(ray_start_regular_shared):
    @ray.remote
    def version():
        return 1

    assert ray.get(version.remote()) == 1

    @ray.remote
    def version():  # noqa: F811 - redefinition is the point of the test
        return 2

    assert ray.get(version.remote()) == 2

    @ray.remote
    def reads_global():
        return _COMPAT_LATE_GLOBAL  # noqa: F821 - not defined yet

    with pytest.raises(exceptions.RayTaskError) as info:
        ray.get(reads_global.remote())
    assert isinstance(info.value, NameError)

    globals()["_COMPAT_LATE_GLOBAL"] = 42
    try:

        @ray.remote
        def reads_global():  # noqa: F811 - defined again now that the global exists
            return _COMPAT_LATE_GLOBAL  # noqa: F821

        assert ray.get(reads_global.remote()) == 42
    finally:
        del globals()["_COMPAT_LATE_GLOBAL"]


def test_remote__functional_form_and_options(ray_start_regular_shared):
    def plain(x):
        return x + 1

    assert ray.get(ray.remote(plain).remote(1)) == 2
    assert ray.get(ray.remote(num_cpus=0)(plain).remote(2)) == 3
    assert ray.get(ray.remote(max_calls=1)(plain).remote(3)) == 4
    decorated = ray.remote(plain)
    assert ray.get(decorated.options(num_cpus=0.5, name="renamed").remote(4)) == 5
    # The function object itself is unchanged.
    assert plain(1) == 2


def test_remote__calling_a_remote_function_directly_raises_type_error(ray_start_regular_shared):
    @ray.remote
    def f():
        return 1

    with pytest.raises(TypeError, match="cannot be called directly"):
        f()


def test_remote__async_def_function_raises_value_error(ray_start_regular_shared):
    async def coroutine_function():
        return 1

    with pytest.raises(ValueError, match="async def"):
        ray.remote(coroutine_function)


# --- calling conventions ------------------------------------------------------------------


def test_basic__passing_arguments_by_value_out_of_the_box(ray_start_regular_shared):
    @ray.remote
    def identity(x):
        return x

    offset = 7

    def closure(x):
        return x + offset

    class Local:
        def __init__(self, v):
            self.v = v

    assert ray.get(identity.remote(lambda x: x * 3))(2) == 6
    assert ray.get(identity.remote(closure))(1) == 8
    assert ray.get(identity.remote({1, 2, 3})) == {1, 2, 3}
    assert ray.get(identity.remote(frozenset("ab"))) == frozenset("ab")
    assert ray.get(identity.remote(int)) is int
    assert ray.get(identity.remote(ValueError)) is ValueError
    assert ray.get(identity.remote(Local)).__name__ == "Local"
    assert ray.get(identity.remote(Local(5))).v == 5
    assert ray.get(identity.remote((1, [2, {"k": 3.5}], None, b"raw"))) == (1, [2, {"k": 3.5}], None, b"raw")


def test_basic__keyword_args(ray_start_regular_shared):
    @ray.remote
    def kw(a, b=2, c="c"):
        return (a, b, c)

    assert ray.get(kw.remote(1)) == (1, 2, "c")
    assert ray.get(kw.remote(1, c="z")) == (1, 2, "z")
    assert ray.get(kw.remote(c="z", b=5, a=0)) == (0, 5, "z")
    assert ray.get(kw.remote(1, 3, 4)) == (1, 3, 4)

    # Arity is checked when the task is submitted, in the caller.
    with pytest.raises(TypeError):
        kw.remote()
    with pytest.raises(TypeError):
        kw.remote(1, 2, 3, 4)
    with pytest.raises(TypeError):
        kw.remote(1, d=4)
    with pytest.raises(TypeError):
        kw.remote(b=1)


def test_basic__args_starkwargs(ray_start_regular_shared):
    @ray.remote
    def with_kwargs(a, **kwargs):
        return a, kwargs

    assert ray.get(with_kwargs.remote(1)) == (1, {})
    assert ray.get(with_kwargs.remote(1, x=2, y=3)) == (1, {"x": 2, "y": 3})

    @ray.remote
    class Actor:
        def method(self, a, **kwargs):
            return a, kwargs

    actor = Actor.remote()
    assert ray.get(actor.method.remote(0, k="v")) == (0, {"k": "v"})

    @ray.remote
    def from_inside_a_task():
        return ray.get(with_kwargs.remote(5, z=6)), ray.get(actor.method.remote(7, w=8))

    assert ray.get(from_inside_a_task.remote()) == ((5, {"z": 6}), (7, {"w": 8}))


def test_basic__args_named_and_star(ray_start_regular_shared):
    @ray.remote
    def f(a, b=1, *args, c=2, **kwargs):
        return a, b, args, c, kwargs

    assert ray.get(f.remote(0)) == (0, 1, (), 2, {})
    assert ray.get(f.remote(0, 9, 8, 7, c=3, d=4)) == (0, 9, (8, 7), 3, {"d": 4})
    assert ray.get(f.remote(a=5, c=6, e=7)) == (5, 1, (), 6, {"e": 7})
    with pytest.raises(TypeError):
        f.remote(1, a=2)  # ``a`` bound twice

    @ray.remote
    class Actor:
        def method(self, a, *args, b=1, **kwargs):
            return a, args, b, kwargs

    actor = Actor.remote()
    assert ray.get(actor.method.remote(1, 2, b=3, c=4)) == (1, (2,), 3, {"c": 4})
    with pytest.raises(TypeError):
        actor.method.remote(1, a=2)


def test_basic__args_stars_after(ray_start_regular_shared):
    @ray.remote
    def defaults_then_star(a, b=2, *args):
        return a, b, args

    @ray.remote
    def star_then_keywords(*args, a=1, b=2):
        return args, a, b

    assert ray.get(defaults_then_star.remote(1)) == (1, 2, ())
    assert ray.get(defaults_then_star.remote(1, 3, 4, 5)) == (1, 3, (4, 5))
    assert ray.get(star_then_keywords.remote()) == ((), 1, 2)
    assert ray.get(star_then_keywords.remote(9, 8, b=7)) == ((9, 8), 1, 7)


def test_basic_2__variable_number_of_args(ray_start_regular_shared):
    @ray.remote
    def varargs(*args):
        return args

    @ray.remote
    def at_least_one(first, *rest):
        return first, rest

    assert ray.get(varargs.remote()) == ()
    assert ray.get(varargs.remote(1, "two", [3])) == (1, "two", [3])
    assert ray.get(at_least_one.remote(1)) == (1, ())
    assert ray.get(at_least_one.remote(1, 2, 3)) == (1, (2, 3))
    with pytest.raises(TypeError):
        at_least_one.remote()


# --- argument resolution --------------------------------------------------------------------


def test_args__top_level_refs_are_resolved(ray_start_regular_shared):
    @ray.remote
    def describe(x, y=None):
        return type(x).__name__, x, type(y).__name__, y

    x = ray.put(3)
    y = ray.put("why")
    assert ray.get(describe.remote(x, y=y)) == ("int", 3, "str", "why")

    @ray.remote
    def produce():
        return [1, 2]

    assert ray.get(describe.remote(produce.remote())) == ("list", [1, 2], "NoneType", None)


def test_args__nested_refs_are_passed_as_refs(ray_start_regular_shared):
    @ray.remote
    def inspect(container):
        kinds = [isinstance(v, ray.ObjectRef) for v in container["refs"]]
        return kinds, ray.get(container["refs"])

    refs = [ray.put(1), ray.put(2)]
    kinds, values = ray.get(inspect.remote({"refs": refs}))
    assert kinds == [True, True]
    assert values == [1, 2]

    @ray.remote
    def inside_list(items):
        return isinstance(items[0], ray.ObjectRef), ray.get(items[0])

    assert ray.get(inside_list.remote([ray.put("v")])) == (True, "v")


def test_args__large_arguments(ray_start_regular_shared):
    @ray.remote
    def checksum(array, nested):
        return float(array.sum()), float(ray.get(nested[0]).sum())

    big = np.ones(2_000_000, dtype=np.float64)  # 16 MB: too big to inline
    assert ray.get(checksum.remote(big, [ray.put(big)])) == (2_000_000.0, 2_000_000.0)
    ref = ray.put(big)
    assert ray.get(checksum.remote(ref, [ref])) == (2_000_000.0, 2_000_000.0)


def test_basic_2__duplicate_args(ray_start_regular_shared):
    @ray.remote
    def five(a, b, c, d=None, e=None):
        return a, b, c, d, e

    ref = ray.put("x")
    assert ray.get(five.remote(ref, ref, 1, d=ref, e=ref)) == ("x", "x", 1, "x", "x")
    assert ray.get(five.remote(1, 1, 1, d=1, e=1)) == (1, 1, 1, 1, 1)

    @ray.remote
    class Actor:
        def five(self, a, b, c, d=None, e=None):
            return a, b, c, d, e

    actor = Actor.remote()
    assert ray.get(actor.five.remote(ref, ref, ref, d=ref, e=2)) == ("x", "x", "x", "x", 2)


def test_args__errors_propagate_through_refs(ray_start_regular_shared):
    @ray.remote
    def fail():
        raise KeyError("missing")

    @ray.remote
    def consume(x):
        return x

    downstream = consume.remote(fail.remote())
    with pytest.raises(KeyError):
        ray.get(downstream)
    with pytest.raises(exceptions.RayTaskError):
        ray.get(downstream)


# --- call matrix: task/actor producer x task/actor consumer x small/large x top-level/nested --


@ray.remote
def _produce(size):
    return np.full(size, 7, dtype=np.uint8)


@ray.remote
def _consume(value, nested):
    if nested:
        value = ray.get(value[0])
    return int(value.sum()), len(value)


@ray.remote
class _Producer:
    def produce(self, size):
        return np.full(size, 7, dtype=np.uint8)


@ray.remote
class _Consumer:
    def consume(self, value, nested):
        if nested:
            value = ray.get(value[0])
        return int(value.sum()), len(value)


@pytest.mark.parametrize("producer_kind", ["task", "actor"])
@pytest.mark.parametrize("consumer_kind", ["task", "actor"])
def test_basic_2__call_matrix(ray_start_regular_shared, producer_kind, consumer_kind):
    producer = _Producer.remote() if producer_kind == "actor" else None
    consumer = _Consumer.remote() if consumer_kind == "actor" else None
    for size in (10, 8 * 1024 * 1024):  # inlined, and stored by reference
        for nested in (False, True):
            ref = producer.produce.remote(size) if producer else _produce.remote(size)
            arg = [ref] if nested else ref
            out = consumer.consume.remote(arg, nested) if consumer else _consume.remote(arg, nested)
            assert ray.get(out) == (7 * size, size)


# --- options ----------------------------------------------------------------------------


def test_options__num_returns(ray_start_regular_shared):
    @ray.remote(num_returns=2)
    def pair():
        return "a", "b"

    first, second = pair.remote()
    assert ray.get([first, second]) == ["a", "b"]

    @ray.remote
    def triple():
        return 1, 2, 3

    refs = triple.options(num_returns=3).remote()
    assert isinstance(refs, list) and len(refs) == 3
    assert ray.get(refs) == [1, 2, 3]
    assert ray.get(triple.options(num_returns=1).remote()) == (1, 2, 3)
    assert triple.options(num_returns=0).remote() is None


def test_options__num_returns_mismatch_raises_at_get(ray_start_regular_shared):
    @ray.remote(num_returns=2)
    def three_values():
        return 1, 2, 3

    refs = three_values.remote()
    with pytest.raises(ValueError):
        ray.get(refs)


def test_decorator_args__invalid_task_options(ray_start_regular_shared):
    def f():
        return 1

    with pytest.raises(ValueError, match="Invalid option keyword"):
        ray.remote(not_an_option=1)(f)
    with pytest.raises(ValueError):
        ray.remote(f).options(not_an_option=1)
    with pytest.raises(ValueError):
        ray.remote(max_restarts=1)(f)  # an actor-only option
    with pytest.raises(TypeError):
        ray.remote(num_cpus="one")(f)
    with pytest.raises(TypeError):
        ray.remote(f).options(max_retries="3")
    with pytest.raises(ValueError):
        ray.remote(num_cpus=-1)(f)
    with pytest.raises(ValueError):
        ray.remote(num_returns=-1)(f)
    with pytest.raises(ValueError, match="num_cpus"):
        ray.remote(resources={"CPU": 1})(f)
    with pytest.raises(ValueError, match="num_gpus"):
        ray.remote(f).options(resources={"GPU": 1})


def test_options__retry_exceptions(ray_start_regular_shared):
    attempts = Recorder.remote()

    @ray.remote(max_retries=3, retry_exceptions=True)
    def flaky(recorder):
        n = ray.get(recorder.record.remote("attempt"))
        if n < 3:
            raise ValueError(f"attempt {n} fails")
        return n

    assert ray.get(flaky.remote(attempts)) == 3

    # The list form retries only the listed exception types.
    listed = Recorder.remote()

    @ray.remote(max_retries=3, retry_exceptions=[KeyError])
    def wrong_type(recorder):
        ray.get(recorder.record.remote("attempt"))
        raise ValueError("not retried")

    with pytest.raises(ValueError):
        ray.get(wrong_type.remote(listed))
    assert ray.get(listed.count.remote()) == 1


def test_options__user_exceptions_not_retried_by_default(ray_start_regular_shared):
    attempts = Recorder.remote()

    @ray.remote
    def fails(recorder):
        ray.get(recorder.record.remote("attempt"))
        raise RuntimeError("once")

    with pytest.raises(RuntimeError):
        ray.get(fails.remote(attempts))
    assert ray.get(attempts.count.remote()) == 1
