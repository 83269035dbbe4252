"""Actors: `@fray_ray.remote` classes, their handles and methods.

>>> @fray_ray.remote
... class Counter:
...     def __init__(self):
...         self.n = 0
...     def incr(self):
...         self.n += 1
...         return self.n
>>> counter = Counter.remote()
>>> fray_ray.get([counter.incr.remote(), counter.incr.remote()])
[1, 2]
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable, Coroutine, Mapping
from typing import TYPE_CHECKING, Any, Concatenate, Generic, NoReturn, ParamSpec, Protocol, TypeVar, cast, overload

from fray_ray._actor_handle import ActorHandle, ActorMethod, ActorProxy
from fray_ray._private.core import actor_handles, runtime_state
from fray_ray._private.core.argument_checks import ArgumentCheck
from fray_ray._private.core.code_size import check_code_size
from fray_ray._private.core.function_names import qualified_name
from fray_ray._private.core.placement_capture import effective_strategy
from fray_ray._private.core.runtime_state import effective_runtime_env
from fray_ray._private.core.task_context import current_task
from fray_ray._private.core.task_spec import ActorCreationSpec, CodeBlob, ResourceShape
from fray_ray._private.objects import ids
from fray_ray._private.options import (
    UNSET,
    ActorOptions,
    split_method_args,
    validate_actor_options,
)
from fray_ray._private.options.quantities import check_c_integers
from fray_ray.remote_function import pack_arguments

__all__ = [
    "ActorClass",
    "ActorClassInheritanceException",
    "ActorHandle",
    "ActorMethod",
    "ActorProxy",
    "exit_actor",
    "method",
]

T = TypeVar("T")
R = TypeVar("R")
P = ParamSpec("P")
S = TypeVar("S", contravariant=True)
F = TypeVar("F", covariant=True)
V = TypeVar("V")


class ActorClassInheritanceException(TypeError):
    """Raised when a class tries to inherit from an actor class."""


class TypedMethod(Protocol[S, P, F, V]):
    """What a type checker sees for a method decorated with `@method` (no runtime class).

    Read through an actor handle it is an `ActorMethod[V]`, so `handle.m.remote()` is an
    `ObjectRef[V]`; read on an instance (`self.m` inside the actor) it is the plain method.
    `S` is the class, `P` the parameters, `F` what calling it returns, `V` the value its
    ref resolves to (`F` itself, or what an `async def` method's coroutine returns).
    """

    @overload
    def __get__(self, instance: None, owner: type[Any], /) -> ActorMethod[V]: ...
    @overload
    def __get__(self, instance: S, owner: type[Any] | None = None, /) -> Callable[P, F]: ...


class _MethodDecorator(Protocol):
    """What `@method(...)` returns: a decorator keeping the method's types."""

    @overload
    def __call__(
        self, function: Callable[Concatenate[S, P], Coroutine[Any, Any, R]], /
    ) -> TypedMethod[S, P, Coroutine[Any, Any, R], R]: ...
    @overload
    def __call__(self, function: Callable[Concatenate[S, P], R], /) -> TypedMethod[S, P, R, R]: ...


@overload
def method(
    function: Callable[Concatenate[S, P], Coroutine[Any, Any, R]], /
) -> TypedMethod[S, P, Coroutine[Any, Any, R], R]: ...
@overload
def method(function: Callable[Concatenate[S, P], R], /) -> TypedMethod[S, P, R, R]: ...
@overload
def method(
    *,
    num_returns: int | str | None = ...,
    concurrency_group: str = ...,
    max_task_retries: int = ...,
    retry_exceptions: bool | list[type[BaseException]] | tuple[type[BaseException], ...] = ...,
    _generator_backpressure_num_objects: int = ...,
    _num_objects_per_yield: int = ...,
    enable_task_events: bool = ...,
    tensor_transport: str = ...,
) -> _MethodDecorator: ...
def method(*args: Any, **kwargs: Any) -> Any:
    """Mark an actor method, bare (`@fray_ray.method`) or with options (`@fray_ray.method(num_returns=2)`).

    The options travel with the method, so every call through any handle gets them (a
    call's `.options()` still overrides them). As in Ray, a decorated method is also typed:
    `handle.m.remote()` is an `ObjectRef` to what `m` returns. The keywords are checked here;
    their values when a call is submitted, where Ray checks them.

    Args:
        *args: the method itself, for the bare form `@method`.
        **kwargs: `num_returns`, `concurrency_group`, `max_task_retries`, `retry_exceptions`,
            `_generator_backpressure_num_objects`, `_num_objects_per_yield`,
            `enable_task_events` or `tensor_transport`.

    Returns:
        The method itself for the bare form; otherwise a decorator that records the options
        on the method and returns the method.

    Raises:
        AssertionError: a keyword is unknown, or positional arguments other than one method
            were given (as in Ray).
    """
    function, options = split_method_args(args, kwargs)
    if function is not UNSET:
        return function

    def decorate(function: Any) -> Any:
        function.__ray_method_options__ = {**getattr(function, "__ray_method_options__", {}), **options}
        return function

    decorator: _MethodDecorator = decorate
    return decorator


def _method_table(cls: type) -> dict[str, dict[str, Any]]:
    """Per-method metadata a handle needs: its argument check, num_returns, concurrency group, async."""
    table: dict[str, dict[str, Any]] = {}
    for name, member in inspect.getmembers(cls):
        if name.startswith("__") and name not in ("__call__",):
            continue
        function = member
        if not (inspect.isfunction(function) or inspect.ismethod(function)):
            continue
        options = dict(getattr(function, "__ray_method_options__", {}))
        try:
            signature = inspect.signature(function)
            static = isinstance(inspect.getattr_static(cls, name), staticmethod)
            if not static and not inspect.ismethod(function):
                parameters = list(signature.parameters.values())[1:]
                signature = signature.replace(parameters=parameters)
        except (TypeError, ValueError):
            signature = None
        table[name] = {
            "arguments": ArgumentCheck(signature) if signature is not None else None,
            "options": options,
            # An async generator method makes the actor async too (its calls run on the loop).
            "is_async": inspect.iscoroutinefunction(function) or inspect.isasyncgenfunction(function),
            "is_generator": inspect.isgeneratorfunction(function) or inspect.isasyncgenfunction(function),
        }
    return table


@dataclasses.dataclass(frozen=True)
class ActorClassMetadata:
    """What `ActorClass.__ray_metadata__` tells about the class, under Ray's names.

    Args:
        modified_class: the class the actor runs (Ray's subclass of the user's class with its
            own methods added; in fray_ray the user's class itself).
        class_name: the class's `__name__`.
    """

    modified_class: type
    class_name: str
    is_cross_language: bool = False


class ActorClass(Generic[T]):
    """What `@fray_ray.remote` makes of a class `T`. Create actors with `.remote(...)`.

    Args:
        cls: the class whose instances run as actors.
        options: the `@remote(...)` options every actor of it starts from.

    Raises:
        ActorClassInheritanceException: a class statement tried to subclass an actor class.
        ValueError: an option is unknown or has a bad value.
        TypeError: an option's value has the wrong type.
    """

    def __init__(self, cls: type[T], options: Mapping[str, Any], *_subclass_args: Any) -> None:
        if _subclass_args or not isinstance(cls, type):
            # A class statement with an actor class among its bases: (name, bases, namespace).
            bases: tuple[Any, ...] = options if isinstance(options, tuple) else ()
            base_name = next((getattr(b, "__name__", "?") for b in bases if isinstance(b, ActorClass)), "?")
            raise ActorClassInheritanceException(
                f"Attempted to define subclass '{cls}' of actor class '{base_name}'. Inheriting from actor classes "
                "is not currently supported. You can instead inherit from a non-actor base class and make the "
                "derived class an actor class (with @ray.remote)."
            )
        self._cls = cls
        self._methods = _method_table(cls)
        # An `async def __init__` makes an async actor too; its host awaits it.
        self._is_async = any(m["is_async"] for m in self._methods.values()) or inspect.iscoroutinefunction(
            getattr(cls, "__init__", None)
        )
        self._default_options = validate_actor_options(dict(options), is_async=self._is_async)
        self._parsed: ActorOptions | None = None
        self._code: CodeBlob | None = None
        self.__doc__ = cls.__doc__
        self.__name__ = cls.__name__
        self.__qualname__ = cls.__qualname__
        self.__module__ = cls.__module__
        #: Ray's names for the user's class, which launchers read: the class itself, and the
        #: class the actor runs with its name (fray_ray runs the class unchanged).
        self.__ray_actor_class__ = cls
        self.__ray_metadata__ = ActorClassMetadata(modified_class=cls, class_name=cls.__name__)

    if not TYPE_CHECKING:  # hidden from type checkers, so they report the call (it always raises)

        def __call__(self, *args: Any, **kwargs: Any) -> NoReturn:
            raise TypeError(
                "Actors cannot be instantiated directly. Instead of "
                f"'{self._cls.__name__}()', use '{self._cls.__name__}.remote()'."
            )

    def __getattr__(self, name: str) -> Any:
        """The class's own attributes (constants, static methods, inherited ones), as in Ray,
        where the actor class derives from the user's class: inside a method the class's name
        is bound to this object, so `MyActor.CONST` must still work."""
        cls = self.__dict__.get("_cls")
        if cls is None:  # while unpickling, before the state is set
            raise AttributeError(name)
        found = getattr(cls, name)
        if inspect.isfunction(found):
            # A fresh wrapper, not the function itself: cloudpickle looks a function up by its
            # qualified name (`Module.MyActor.method`) and, finding the same object, would pickle
            # it by reference to a module the workers may not be able to import.
            function = found

            @functools.wraps(function)
            def call(*args: Any, **kwargs: Any) -> Any:
                return function(*args, **kwargs)

            return call
        return found

    def __dir__(self) -> list[str]:
        return sorted({*self._methods, "options", "remote", "bind"})

    def __repr__(self) -> str:
        return f"ActorClass({self._cls.__name__})"

    def options(self, **options: Any) -> _ActorOptions[T]:
        """Override some options for the actors created through the returned view.

        Args:
            **options: the options of `remote(...)` for classes to change (name, namespace,
                lifetime, resources, ...).

        Returns:
            A view with `.remote()` creating actors of this class with the merged options.

        Raises:
            ValueError: an option is unknown or has a bad value, or is one `.options()` cannot
                change (`concurrency_groups`).
            TypeError: an option's value has the wrong type.
        """
        validate_actor_options(options, is_async=self._is_async, in_options=True)
        merged = validate_actor_options({**self._default_options, **options}, is_async=self._is_async)
        return _ActorOptions(self, merged)

    def remote(self, *args: Any, **kwargs: Any) -> ActorProxy[T]:
        """Create an actor and return its handle at once; calls queue until it is up.

        Args:
            *args: arguments of the class's `__init__` (an ObjectRef stands for its value).
            **kwargs: keyword arguments of `__init__`.

        Returns:
            The actor's handle, typed `ActorProxy[T]` as in Ray, so methods decorated with
            `@method` are typed. A gang (`tpu` option) over several hosts returns a list
            of handles, one per host.

        Raises:
            TypeError: the arguments do not fit `__init__`, or cannot be pickled.
            OverflowError: an integer option does not fit a C long (checked here, as in Ray).
            ValueError: the actor's name or namespace is empty, `get_if_exists` has no name,
                or a named actor exists.
        """
        handle: ActorProxy[T] = self._create(args, kwargs, self._default_options, self._default_typed)
        return handle

    def _default_typed(self) -> ActorOptions:
        if self._parsed is None:
            self._parsed = ActorOptions.from_checked(self._default_options, is_async=self._is_async)
        return self._parsed

    def _remote(self, args: Any = None, kwargs: Any = None, **options: Any) -> ActorProxy[T]:
        """Ray's older calling form, which libraries still use: `.options(**options).remote(*args, **kwargs)`."""
        target = self.options(**options) if options else self
        return target.remote(*(args or ()), **(kwargs or {}))

    def bind(self, *args: Any, **kwargs: Any) -> NoReturn:
        """Ray builds a DAG node here; fray_ray has no DAGs.

        Raises:
            NotImplementedError: always; call `.remote()` instead.
        """
        raise NotImplementedError("fray_ray does not support Ray DAGs (.bind()); call .remote() instead")

    def _code_blob(self) -> CodeBlob:
        if self._code is None:
            try:
                code = CodeBlob.of(self._cls, self._cls.__name__)
            except Exception as exc:
                raise TypeError(f"Could not serialize the actor class {self._cls.__name__}: {exc}") from exc
            check_code_size(code.payload, "actor", self._cls.__name__)  # Ray names the class alone here
            self._code = code
        return self._code

    def _create(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], given: Mapping[str, Any], typed: Callable[[], ActorOptions]
    ) -> Any:
        """Create one actor; `given` are the keywords (checked for C integers here, as in Ray),
        `typed` parses them (on first use, so that their cross-checks also fail here)."""
        check_c_integers(given)
        init = getattr(self._cls, "__init__", None)
        if init is not None and init is not object.__init__:
            try:
                signature = inspect.signature(init)
                signature = signature.replace(parameters=list(signature.parameters.values())[1:])
                signature.bind(*args, **kwargs)
            except ValueError:
                pass
        elif args or kwargs:
            raise TypeError(f"{self._cls.__name__}() takes no arguments")
        options = typed()  # an empty name or namespace raises here
        from fray_ray._private.driver.gangs import shape_for  # the gang scheduler loads on first call

        runtime = runtime_state.current()
        gang = shape_for(options)
        runtime_env = effective_runtime_env(options.runtime_env)
        shape, placement = actor_shapes(options)
        spec = ActorCreationSpec(
            actor_id=ids.new_actor_id(),
            cls=self._code_blob(),
            class_name=self._cls.__name__,
            qualified_name=qualified_name(self._cls),
            arguments=pack_arguments(args, kwargs, f"{self._cls.__name__}.__init__"),
            shape=shape,
            placement=placement,
            methods=self._methods,
            is_async=self._is_async,
            max_concurrency=int(cast(int, options.max_concurrency)),  # parsing resolves it (never UNSET)
            concurrency_groups=dict(options.concurrency_groups),
            max_restarts=options.max_restarts,
            max_task_retries=options.max_task_retries,
            task_events=options.enable_task_events,
            name=options.name,
            namespace=options.namespace,
            get_if_exists=options.get_if_exists,
            detached=options.detached,
            env_vars=runtime_env.env_vars_dict,
            runtime_env=runtime_env,
            scheduling_strategy=effective_strategy(options),
            accelerator=options.accelerator_type,
            gang=gang,
        )
        if gang is not None:
            spec.shape, spec.placement = ResourceShape(cpu=0.0), None  # the slice's hosts are the resource
            member_ids = cast("list[bytes]", runtime.create_actor(spec))
            # One actor per host, in host order (a single handle for a one-host slice).
            handles: list[ActorHandle[T]] = [ActorHandle(i, self._cls.__name__, self._methods, self._is_async) for i in member_ids]
            return handles if len(handles) > 1 else handles[0]
        actor_id = cast(bytes, runtime.create_actor(spec))
        if actor_id != spec.actor_id:  # get_if_exists found a live actor
            info = runtime.get_named_actor(cast(str, spec.name), spec.namespace)
            return ActorHandle(info["actor_id"], info["class_name"], info["methods"], info["is_async"])
        return ActorHandle(actor_id, self._cls.__name__, self._methods, self._is_async)


def actor_shapes(options: ActorOptions) -> tuple[ResourceShape, ResourceShape | None]:
    """(what the actor holds while alive, what a node must have to place it; None: the same),
    by Ray 2.60's rule (see `ActorOptions.scheduling_demand` and `resource_demand`).

    >>> actor_shapes(ActorOptions())
    (ResourceShape(cpu=0.0, gpu=0.0, memory=0, custom=()), ResourceShape(cpu=1.0, gpu=0.0, memory=0, custom=()))
    >>> actor_shapes(ActorOptions.from_options({"num_gpus": 1}))[0].cpu
    1.0
    """
    held, to_place = float(options.resource_demand()["CPU"]), float(options.scheduling_demand()["CPU"])
    shape = ResourceShape(
        cpu=held, gpu=options.num_gpus, memory=options.memory, custom=tuple(sorted(options.resources.items()))
    )
    return shape, None if to_place == held else dataclasses.replace(shape, cpu=to_place)


class _ActorOptions(Generic[T]):
    def __init__(self, actor_class: ActorClass[T], options: Mapping[str, Any]) -> None:
        self._actor_class = actor_class
        self._options = options
        self._parsed: ActorOptions | None = None

    def remote(self, *args: Any, **kwargs: Any) -> ActorProxy[T]:
        """Create an actor with these options; see `ActorClass.remote`."""
        handle: ActorProxy[T] = self._actor_class._create(args, kwargs, self._options, self._typed)
        return handle

    def _typed(self) -> ActorOptions:
        if self._parsed is None:
            self._parsed = ActorOptions.from_checked(self._options, is_async=self._actor_class._is_async)
        return self._parsed

    def bind(self, *args: Any, **kwargs: Any) -> NoReturn:
        """Ray builds a DAG node here; fray_ray has no DAGs (raises NotImplementedError)."""
        self._actor_class.bind(*args, **kwargs)


def exit_actor() -> NoReturn:
    """End the current actor once this call returns; later calls raise ActorDiedError.

    Raises:
        TypeError: called outside an actor.
    """
    from fray_ray._private.workers.actor_host import ActorExit  # loaded in actors only, where it already is

    context = current_task.get()
    if context is None or context.actor_id is None:
        raise TypeError("exit_actor API is called on a non-actor worker.")
    raise ActorExit()


actor_handles.set_own_handle_factory(
    lambda actor_id, class_name, methods, is_async: ActorHandle(
        actor_id, class_name, methods, is_async, _register=False  # the actor's own handle must not keep it alive
    )
)
