"""Actor handles and their methods: what calling an actor turns into.

`handle.method.remote(...)` checks the arguments against the method's signature, parses the
call's options (as Ray does at `.remote()`), and hands an `ActorCallSpec` to the runtime, which
returns the call's refs. A handle counts as a reference to its actor wherever it lives, and
pickles down to the actor's id and method table. Creating actors (`@fray_ray.remote` classes,
their options) is `fray_ray.actor`'s, which re-exports `ActorHandle`, `ActorMethod` and
`ActorProxy` as their public home (and their `__module__` says so).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Generic, NoReturn, TypeAlias, TypeVar, cast

from fray_ray._private.core import object_ref, runtime_state
from fray_ray._private.core.object_ref import ObjectRef
from fray_ray._private.core.task_spec import ActorCallSpec
from fray_ray._private.objects import ids
from fray_ray._private.objects.serialization import note_contained_ref
from fray_ray._private.objects.unique_ids import ActorID
from fray_ray._private.options import UNSET, MethodOptions, check_method_call_keys, validate_method_options
from fray_ray._private.options.quantities import method_call_integer, method_num_returns
from fray_ray.remote_function import pack_arguments, return_ids_for

__all__ = ["ActorHandle", "ActorMethod", "ActorProxy"]

T = TypeVar("T")
R = TypeVar("R")

#: Methods every actor has, as in Ray: `__ray_ready__` (True once the actor is up),
#: `__ray_call__(fn, *args)` (runs `fn(instance, *args)` in the actor) and `__ray_terminate__`.
_BUILT_IN_METHODS = frozenset({"__ray_ready__", "__ray_call__", "__ray_terminate__"})


class ActorHandle(Generic[T]):
    """A reference to an actor of class `T`; `handle.method.remote(...)` calls it. Picklable.

    A non-detached actor lives while a handle to it exists anywhere (here, in a task, inside a
    stored value); when the last one goes, the actor ends after its pending calls. A type
    checker sees a method read from a bare `ActorHandle[T]` as `ActorMethod[Any]`; through
    `ActorProxy[T]` (what `.remote()` returns) methods decorated with `@method` are typed.

    Args:
        actor_id: the actor's id.
        class_name: the actor's class name, for messages.
        methods: what calls need to know about each method (argument check, options).
        is_async: whether the actor runs its calls on an event loop.
    """

    def __init__(
        self,
        actor_id: bytes,
        class_name: str,
        methods: Mapping[str, Mapping[str, Any]],
        is_async: bool = False,
        *,
        _register: bool = True,
    ) -> None:
        self._id_bytes = actor_id
        self._class_name = class_name
        self._methods = methods
        self._is_async = is_async
        self._counter = None  # the reference counter this handle is counted in
        #: each method's options once a call checked them (a handle makes a new method object
        #: per `handle.method`; keeping those objects here would make a cycle that holds the actor)
        self._checked_options: dict[str, MethodOptions] = {}
        if _register:
            runtime = runtime_state.current_or_none()
            if runtime is not None:
                runtime.references.add(actor_id)
                self._counter = runtime.references

    def __del__(self) -> None:
        counter = self.__dict__.get("_counter")
        if counter is not None:
            counter.release_later(self._id_bytes)

    def __getattr__(self, name: str) -> ActorMethod[Any]:
        methods = self.__dict__.get("_methods") or {}
        if name in methods:
            return ActorMethod(self, name, methods[name])
        if name in _BUILT_IN_METHODS:
            return ActorMethod(self, name, {"options": {}, "arguments": None})
        raise AttributeError(f"'ActorHandle' object has no attribute '{name}'")

    def __dir__(self) -> list[str]:
        return sorted(self._methods)

    def __reduce__(self) -> tuple[Any, ...]:
        note_contained_ref(self._id_bytes)
        return (ActorHandle, (self._id_bytes, self._class_name, self._methods, self._is_async))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ActorHandle) and other._id_bytes == self._id_bytes

    def __hash__(self) -> int:
        return hash(self._id_bytes)

    def __repr__(self) -> str:
        return f"Actor({self._class_name}, {self._id_bytes.hex()})"

    @property
    def _actor_id(self) -> ActorID:
        """The actor's `ActorID` (`.hex()`, `.binary()`), read by launchers as in Ray."""
        return ActorID(self._id_bytes)

    @property
    def _ray_actor_id(self) -> ActorID:
        return ActorID(self._id_bytes)


class ActorMethod(Generic[R]):
    """One method of an actor, read from its handle; call it with `.remote(...)`.

    `ActorMethod[R]` is a method returning `R`, so `.remote()` gives an `ObjectRef[R]`.

    Args:
        handle: the actor's handle.
        name: the method's name.
        info: what calls need to know about the method (argument check, options).
        options: options set by `.options()` for calls through this object.
    """

    def __init__(self, handle: ActorHandle[Any], name: str, info: Mapping[str, Any], options: Mapping[str, Any] | None = None) -> None:
        self._handle = handle
        self._name = name
        self._info = info
        self._options = dict(options or {})
        self._parsed: MethodOptions | None = None  # the options, once a call has checked them

    if not TYPE_CHECKING:  # hidden from type checkers, so they report the call (it always raises)

        def __call__(self, *args: Any, **kwargs: Any) -> NoReturn:
            raise TypeError(
                f"Actor methods cannot be called directly. Instead of running 'object.{self._name}()', try "
                f"'object.{self._name}.remote()'."
            )

    def options(self, **options: Any) -> ActorMethod[R]:
        """Override some options for calls through the returned method object.

        Args:
            **options: `num_returns`, `name`, `concurrency_group`, `max_task_retries`,
                `retry_exceptions`, `enable_task_events`, `_generator_backpressure_num_objects`,
                `_num_objects_per_yield` or `tensor_transport`.

        Returns:
            This method with the options merged over its own.

        Raises:
            TypeError: an option is unknown.
            ValueError: `num_returns` is negative (the other values are checked at `.remote()`).
        """
        check_method_call_keys(options)
        count = options.get("num_returns")
        if isinstance(count, int) and count < 0:  # Ray checks this one here; the rest at .remote()
            raise ValueError(f"num_returns must be >= 0, but got {count}.")
        return ActorMethod(self._handle, self._name, self._info, {**self._options, **options})

    def _remote(self, args: Any = None, kwargs: Any = None, **options: Any) -> Any:
        """Ray's older calling form, which libraries still use: `.options(**options).remote(*args,
        **kwargs)`; an option given as None is left at its default, as in Ray's signature."""
        given = {key: value for key, value in options.items() if value is not None}
        target = self.options(**given) if given else self
        return target.remote(*(args or ()), **(kwargs or {}))

    def remote(self, *args: Any, **kwargs: Any) -> ObjectRef[R]:
        """Queue a call on the actor and return at once; calls from one caller run in order.

        Args:
            *args: the method's arguments; an ObjectRef stands for its value.
            **kwargs: keyword arguments, likewise.

        Returns:
            A ref to the result. With `num_returns=n` (n > 1) a list of refs, with
            `num_returns=0` None, and for a generator method an ObjectRefGenerator; the type
            says `ObjectRef[R]`, as Ray's does, so annotate those results yourself.

        Raises:
            TypeError: the arguments do not fit the method's signature, cannot be pickled, or
                an option value has the wrong type (options are checked here, as in Ray).
            ValueError: an option has a bad value (e.g. a negative `num_returns`).
            OverflowError: an integer option does not fit a C long.
            AssertionError: `retry_exceptions` is neither a bool nor a list of exception types.
        """
        arguments = self._info.get("arguments")
        if arguments is not None:
            arguments.check(args, kwargs)
        options = self._call_options()
        num_returns = cast("int | str", options.num_returns)  # parsing resolves it (never UNSET)
        call_id = ids.new_task_id()
        return_ids, count = return_ids_for(call_id, num_returns)
        with object_ref.escapes_held():  # the arguments' refs are dealt with as the call is routed
            spec = ActorCallSpec(
                actor_id=self._handle._id_bytes,
                call_id=call_id,
                method=self._name,
                arguments=pack_arguments(args, kwargs, f"{self._handle._class_name}.{self._name}"),
                return_ids=return_ids,
                num_returns=num_returns if isinstance(num_returns, str) else count,
                concurrency_group=options.concurrency_group,
                max_task_retries=None if options.max_task_retries is UNSET else options.max_task_retries,
                retry_exceptions=options.retry_exceptions,
                task_events=None if options.enable_task_events is UNSET else options.enable_task_events,
                name=options.name,
            )
            refs: Any = runtime_state.current().submit_actor_call(spec)
        if isinstance(num_returns, str) or count == 1:
            return refs[0]  # type: ignore[no-any-return]
        return refs if count else None  # type: ignore[return-value]

    def _call_options(self) -> MethodOptions:
        """The method's `@method` keywords with this call's `.options()` on top, checked and
        converted as Ray does at `.remote()` (integers as C integers: 2.0 is 2, NaN raises).
        Kept once they pass: neither set of keywords changes for this method object."""
        if self._parsed is not None:
            return self._parsed
        plain = not self._options  # options of the method alone, the same for every call through the handle
        if plain:
            parsed = self._handle._checked_options.get(self._name)
            if parsed is not None:
                self._parsed = parsed
                return parsed
        # Each value's type is part of the key: 1 and True are equal, but only True is a valid
        # retry_exceptions.
        given = tuple((key, type(value), value) for key, value in {**self._info.get("options", {}), **self._options}.items())
        is_generator = bool(self._info.get("is_generator"))
        try:
            hash(given)
        except TypeError:  # e.g. retry_exceptions given as a list
            parsed = _method_call_options(given, is_generator)
        else:
            parsed = _cached_method_call_options(given, is_generator)
        self._parsed = parsed
        if plain:
            self._handle._checked_options[self._name] = parsed
        return parsed

    def bind(self, *args: Any, **kwargs: Any) -> NoReturn:
        """Ray builds a DAG node here; fray_ray has no DAGs.

        Raises:
            NotImplementedError: always; call `.remote()` instead.
        """
        raise NotImplementedError("fray_ray does not support Ray DAGs (.bind()); call .remote() instead")


def _method_call_options(given: tuple[tuple[str, type, Any], ...], is_generator: bool) -> MethodOptions:
    """Parse one call's method keywords (key, type, value), converting them as Ray does at `.remote()`."""
    options = {key: value for key, _, value in given}
    if options.get("num_returns") is not None:
        options["num_returns"] = method_num_returns(options["num_returns"])
    if options.get("max_task_retries") is not None:
        options["max_task_retries"] = method_call_integer("max_task_retries", options["max_task_retries"])
    if options.get("retry_exceptions") is not None:
        validate_method_options({"retry_exceptions": options["retry_exceptions"]}, in_options=True)
    return MethodOptions.from_checked(options, is_generator=is_generator)


# Most calls repeat a few keyword sets (usually none), so their parsed values are kept.
_cached_method_call_options = functools.lru_cache(maxsize=1024)(_method_call_options)


ActorProxy: TypeAlias = ActorHandle[T] | type[T]
"""What `ActorClass[T].remote()` returns, for type checkers: a handle, seen also as the class.

Reading `handle.m` through the class side gives a method decorated with `@method` its
`ActorMethod[R]` type (see `TypedMethod`), as Ray's `ActorProxy` does. An undecorated method
reads as the plain function, so a checker rejects `.remote` on it: decorate methods you want
checked, or annotate the handle as `ActorHandle[T]` to see every method as `ActorMethod[Any]`.
"""


# The public home of both classes (reprs, pickles and docs name it, as before the split).
ActorHandle.__module__ = "fray_ray.actor"
ActorMethod.__module__ = "fray_ray.actor"
