"""RemoteFunction: what `@fray_ray.remote` makes of a function.

>>> @fray_ray.remote
... def add(a, b):
...     return a + b
>>> fray_ray.get(add.remote(1, 2))
3
"""

from __future__ import annotations

import inspect
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, NoReturn, ParamSpec, Protocol, TypeVar, cast

from fray_ray._private.core import runtime_state
from fray_ray._private.core.argument_checks import ArgumentCheck
from fray_ray._private.core.code_size import check_code_size
from fray_ray._private.core.function_names import qualified_name
from fray_ray._private.core.object_ref import ObjectRef
from fray_ray._private.core.placement_capture import effective_strategy
from fray_ray._private.core.runtime_state import effective_runtime_env
from fray_ray._private.core.task_context import current_task
from fray_ray._private.core.task_spec import Arguments, CodeBlob, PoolKey, ResourceShape, TaskSpec, canonical_pool
from fray_ray._private.objects import ids
from fray_ray._private.options import TaskOptions, validate_task_options
from fray_ray._private.options.quantities import check_c_integers
from fray_ray.runtime_env.runtime_env import RuntimeEnv

__all__ = ["RemoteFunction"]

P = ParamSpec("P")
R = TypeVar("R")


class RemoteFunction(Generic[P, R]):
    """A function that runs as a task: `f.remote(...)` returns an ObjectRef at once.

    `RemoteFunction[P, R]` keeps the function's parameters `P` and return type `R`, so
    `ray.get(f.remote(...))` is typed as `R`. Arguments of `.remote()` are not checked against
    `P`: each may be the value or an ObjectRef to it, which Python's typing cannot spell for a
    whole parameter list.

    Args:
        function: the function to run (not a coroutine function: tasks are synchronous).
        options: the `@remote(...)` options every call starts from.

    Raises:
        ValueError: `function` is an `async def` function, or an option is unknown or has a
            bad value.
        TypeError: an option's value has the wrong type.
    """

    def __init__(self, function: Callable[P, R], options: Mapping[str, Any]) -> None:
        if inspect.iscoroutinefunction(function):
            raise ValueError(
                "'async def' should not be used for remote tasks. You can wrap the async function with "
                "`asyncio.run(f())`. See more at:https://docs.ray.io/en/latest/ray-core/actors/async_api.html "
            )
        self._function = function
        self._is_generator = inspect.isgeneratorfunction(function)
        self._default_options = validate_task_options(dict(options), is_generator=self._is_generator)
        self._parsed: TaskOptions | None = None
        self._call_plan: _CallPlan | None = None  # see `_CallPlan`
        self._function_name = f"{getattr(function, '__module__', '')}.{getattr(function, '__qualname__', repr(function))}"
        self._display_name = getattr(function, "__name__", "task")
        self._qualified_name = qualified_name(function)  # get_task_function_name()
        try:
            self._arguments: ArgumentCheck | None = ArgumentCheck(inspect.signature(function))
        except (TypeError, ValueError):
            self._arguments = None
        self._code: CodeBlob | None = None
        self.__doc__ = getattr(function, "__doc__", None)
        self.__name__ = self._display_name
        self.__qualname__ = getattr(function, "__qualname__", self._display_name)
        self.__module__ = getattr(function, "__module__", __name__)
        self.__wrapped__ = function

    @property
    def _num_returns(self) -> Any:
        """The `num_returns` the function was declared with (None when not given), as Ray's
        attribute of that name."""
        return self._default_options.get("num_returns")

    @property
    def _runtime_env(self) -> RuntimeEnv | None:
        """The `runtime_env` the function was declared with, as a `RuntimeEnv` (None when not given)."""
        env = self._default_options.get("runtime_env")
        return None if env is None else RuntimeEnv(**dict(env), _validate=False)

    if not TYPE_CHECKING:  # hidden from type checkers, so they report the call (it always raises)

        def __call__(self, *args: Any, **kwargs: Any) -> NoReturn:
            raise TypeError(
                "Remote functions cannot be called directly. Instead of running "
                f"'{self._function_name}()', try '{self._function_name}.remote()'."
            )

    def __repr__(self) -> str:
        return f"<fray_ray.remote_function.RemoteFunction object for {self._function_name}>"

    def __getstate__(self) -> dict[str, Any]:
        # A function pickled into other remote code travels without its call plan, which
        # belongs to this process's runtime.
        return {**self.__dict__, "_call_plan": None}

    def options(self, **options: Any) -> _BoundOptions[P, R]:
        """Override some options for the calls made through the returned view.

        The function itself keeps its options, so one definition serves differently sized calls.

        Args:
            **options: the options of `remote(...)` to change (`max_calls` belongs to the
                function, not to a call, and is refused).

        Returns:
            A view with `.remote()` and `.options()`, typed like this function.

        Raises:
            ValueError: an option is unknown or has a bad value.
            TypeError: an option's value has the wrong type.

        >>> add.options(num_cpus=2).remote(1, 2)  # doctest: +SKIP
        """
        merged = validate_task_options({**self._default_options, **options}, is_generator=self._is_generator)
        _refuse_max_calls(options)
        return _BoundOptions(self, merged)

    def remote(self, *args: Any, **kwargs: Any) -> ObjectRef[R]:
        """Submit a call and return at once; the task runs on the cluster.

        Args:
            *args: the function's arguments; an ObjectRef stands for its value, which the task
                receives once it is ready.
            **kwargs: keyword arguments, likewise.

        Returns:
            A ref to the result. With `num_returns=n` (n > 1) a list of n refs, with
            `num_returns=0` None, and for a generator function an ObjectRefGenerator; the type
            says `ObjectRef[R]`, as Ray's does, so annotate those results yourself.

        Raises:
            TypeError: the arguments do not fit the function's signature, or one cannot be
                pickled.
            OverflowError: an integer option does not fit a C long (checked here, as in Ray).
            ValueError: the options do not fit together (checked on the first call, as in Ray).
        """
        ref: ObjectRef[R] = self._submit(args, kwargs, self._default_options, self._default_typed, self)
        return ref

    def _default_typed(self) -> TaskOptions:
        if self._parsed is None:
            self._parsed = TaskOptions.from_checked(self._default_options, is_generator=self._is_generator)
        return self._parsed

    def _remote(self, args: Any = None, kwargs: Any = None, **options: Any) -> Any:
        """Ray's older calling form, which libraries still use: `.options(**options).remote(*args, **kwargs)`."""
        if options:
            return self.options(**options).remote(*(args or ()), **(kwargs or {}))
        return self.remote(*(args or ()), **(kwargs or {}))

    def bind(self, *args: Any, **kwargs: Any) -> NoReturn:
        """Ray builds a DAG node here; fray_ray has no DAGs.

        Raises:
            NotImplementedError: always; call `.remote()` instead.
        """
        raise NotImplementedError("fray_ray does not support Ray DAGs (.bind()); call .remote() instead")

    def _code_blob(self) -> CodeBlob:
        if self._code is None:
            try:
                code = CodeBlob.of(self._function, self._display_name)
            except Exception as exc:
                raise TypeError(
                    f"Could not serialize the function {self._function_name}: {exc}. Functions sent to workers must "
                    "be picklable with cloudpickle (check what the function refers to)."
                ) from exc
            # Ray names the function `module.__name__` here (not its qualified name)
            size_name = f"{getattr(self._function, '__module__', '')}.{getattr(self._function, '__name__', '')}"
            check_code_size(code.payload, "remote function", size_name)
            self._code = code
        return self._code

    def _submit(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], given: Mapping[str, Any], typed: Callable[[], TaskOptions],
        owner: _PlanHolder,
    ) -> Any:
        """Submit one call; `given` are the keywords (checked for C integers here, as in Ray),
        `typed` parses them (on first use, so that their cross-checks also fail at submit), and
        `owner` keeps what calls with these options share (`_CallPlan`)."""
        plan = owner._call_plan
        if plan is None:
            check_c_integers(given)
        if self._arguments is not None:
            self._arguments.check(args, kwargs)  # TypeError here, at submit time, as in Ray
        options = plan.options if plan is not None else typed()
        runtime = runtime_state.current()
        if plan is None or plan.runtime() is not runtime:
            plan = owner._call_plan = _CallPlan.of(options, runtime, self._display_name)
        arguments = pack_arguments(args, kwargs, self._function_name)
        num_returns = plan.num_returns
        task_id = ids.new_task_id()
        gang_id = options.gang
        if plan.gang is None and gang_id is not None:
            num_returns = runtime.gang_size(gang_id)  # a reserved gang: one ref per host
        return_ids, count = return_ids_for(task_id, num_returns)
        context = current_task.get()
        spec = TaskSpec(
            task_id=task_id,
            function=self._code_blob(),
            arguments=arguments,
            return_ids=return_ids,
            num_returns=num_returns if isinstance(num_returns, str) else count,
            name=plan.name,
            function_name=self._qualified_name,
            pool=plan.pool,
            max_retries=options.max_retries,
            retry_exceptions=options.retry_exceptions,
            task_events=options.enable_task_events,
            scheduling_strategy=effective_strategy(options),
            runtime_env=plan.runtime_env,
            parent_task_id=context.task_id if context else None,
            gang=plan.gang,
            gang_id=gang_id,
        )
        refs = runtime.submit_task(spec)
        if isinstance(num_returns, str) or count == 1:
            return refs[0]
        return refs if count else None


class _PlanHolder(Protocol):
    _call_plan: _CallPlan | None


@dataclass(frozen=True)
class _CallPlan:
    """What every call with one set of options shares, worked out on the first call (and again
    in another runtime: the executor pool inherits the runtime's runtime env)."""

    options: TaskOptions
    #: the runtime it was worked out for (weakly: a plan must not keep a finished session alive)
    runtime: weakref.ref[Any]
    pool: PoolKey
    #: the gang every call runs on (a GangShape), or None
    gang: Any
    #: the returns of each call: the option's, or one per host of `gang`
    num_returns: int | str
    name: str
    runtime_env: Mapping[str, Any]

    @classmethod
    def of(cls, options: TaskOptions, runtime: Any, display_name: str) -> _CallPlan:
        from fray_ray._private.driver.gangs import shape_for  # the gang scheduler loads on first call

        gang = shape_for(options)
        num_returns = cast("int | str", options.num_returns)  # parsing resolves it (never UNSET)
        if gang is not None:
            num_returns = gang.size  # one ref per host (a single ref for a one-host slice)
        return cls(options, weakref.ref(runtime), pool_key(options), gang, num_returns, options.name or display_name,
                   dict(options.runtime_env or {}))


class _BoundOptions(Generic[P, R]):
    """`f.options(...)`: submits with the merged options."""

    def __init__(self, function: RemoteFunction[P, R], options: Mapping[str, Any]) -> None:
        self._function = function
        self._options = options
        self._parsed: TaskOptions | None = None
        self._call_plan: _CallPlan | None = None

    def remote(self, *args: Any, **kwargs: Any) -> ObjectRef[R]:
        """Submit a call with these options; see `RemoteFunction.remote`."""
        ref: ObjectRef[R] = self._function._submit(args, kwargs, self._options, self._typed, self)
        return ref

    def _typed(self) -> TaskOptions:
        if self._parsed is None:
            self._parsed = TaskOptions.from_checked(self._options, is_generator=self._function._is_generator)
        return self._parsed

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_call_plan": None}  # as RemoteFunction's

    def options(self, **options: Any) -> _BoundOptions[P, R]:
        """Override more options; see `RemoteFunction.options`."""
        merged = validate_task_options(
            {**self._options, **options}, is_generator=self._function._is_generator
        )
        _refuse_max_calls(options)
        return _BoundOptions(self._function, merged)

    def bind(self, *args: Any, **kwargs: Any) -> NoReturn:
        """Ray builds a DAG node here; fray_ray has no DAGs (raises NotImplementedError)."""
        self._function.bind(*args, **kwargs)


def return_ids_for(task_id: bytes, num_returns: int | str) -> tuple[tuple[bytes, ...], int]:
    """The ids a call's results get: one per return; none for a stream (items come later);
    one container (index 0) for "dynamic"."""
    if num_returns == 1:
        return (task_id + _FIRST_RETURN,), 1  # ids.object_id_for(task_id, 1), the usual case
    if num_returns == "streaming":
        return (), 0
    if num_returns == "dynamic":
        return (ids.object_id_for(task_id, 0),), 1
    count = int(num_returns)
    return tuple(ids.object_id_for(task_id, i + 1) for i in range(max(count, 0))), count


_FIRST_RETURN = (1).to_bytes(4, "little")


def pack_arguments(args: tuple[Any, ...], kwargs: dict[str, Any], what: str) -> Arguments:
    """Pickle call arguments, naming the argument that cannot be pickled if one fails."""
    try:
        return Arguments.pack(args, kwargs)
    except Exception as exc:
        for position, value in enumerate(args):
            if not _picklable(value):
                raise TypeError(
                    f"Could not serialize argument {position} ({type(value).__name__}) of {what}: {exc}"
                ) from exc
        for name, value in kwargs.items():
            if not _picklable(value):
                raise TypeError(
                    f"Could not serialize argument '{name}' ({type(value).__name__}) of {what}: {exc}"
                ) from exc
        raise TypeError(f"Could not serialize the arguments of {what}: {exc}") from exc


def _picklable(value: Any) -> bool:
    import cloudpickle

    try:
        cloudpickle.dumps(value)
        return True
    except Exception:  # noqa: BLE001 - any failure means "not picklable"
        return False


def _refuse_max_calls(options: Mapping[str, Any]) -> None:
    """`max_calls` belongs to the function (its worker processes), not to one call's options."""
    if "max_calls" in options:
        raise ValueError("Setting 'max_calls' is not supported in '.options()'.")


def pool_key(options: TaskOptions) -> PoolKey:
    """Which executor pool runs a task with these options."""
    shape = ResourceShape(
        cpu=options.num_cpus,
        gpu=options.num_gpus,
        memory=options.memory,
        custom=tuple(sorted(options.resources.items())),
    )
    runtime_env = effective_runtime_env(options.runtime_env)
    max_calls = options.max_calls
    accelerator = options.accelerator_type
    if shape.gpu > 0 and not max_calls:
        max_calls = 1  # tasks holding devices get their own process
    return canonical_pool(PoolKey(
        shape=shape, env_vars=runtime_env.env_vars, max_calls=max_calls, accelerator=accelerator, runtime_env=runtime_env
    ))
