"""Functions and actors as real Ray programs use them: recursion from closures, class
attributes inside actor methods, actors that exit, restart budgets and large closures.

Mirrors Ray's test_recursion.py and test_actor*.py (the name after ``__`` is the Ray test).
"""

from __future__ import annotations

from compat_tests._backend import ray

# --- recursion ------------------------------------------------------------------------------


@ray.remote
def factorial(n):
    return 1 if n == 0 else n * ray.get(factorial.remote(n - 1))


def make_factorial():
    """A recursive remote function defined inside a function: pickled by value, with itself in
    its closure."""

    @ray.remote
    def closure_factorial(n):
        return 1 if n == 0 else n * ray.get(closure_factorial.remote(n - 1))

    return closure_factorial


def make_tree():
    @ray.remote
    def tree(depth, width):
        if depth == 0:
            return 1
        return 1 + sum(ray.get([tree.remote(depth - 1, width) for _ in range(width)]))

    return tree


def test_recursion__recursion(ray_start_regular):
    # One CPU: every nested call waits while its caller blocks in ``get``.
    assert [ray.get(factorial.remote(n)) for n in range(6)] == [1, 1, 2, 6, 24, 120]


def test_functions__closure_recursion_one_cpu(ray_start_regular):
    closure_factorial = make_factorial()
    assert [ray.get(closure_factorial.remote(n)) for n in range(6)] == [1, 1, 2, 6, 24, 120]


def test_functions__closure_recursion_in_parallel(ray_start_regular_shared):
    closure_factorial = make_factorial()
    assert ray.get([closure_factorial.remote(n) for n in (3, 5, 6, 4)]) == [6, 120, 720, 24]


def test_functions__deep_recursive_task_tree(ray_start_regular_shared):
    tree = make_tree()
    # depth 3, width 3: 1 + 3 + 9 + 27 tasks
    assert ray.get(tree.remote(3, 3)) == 40
