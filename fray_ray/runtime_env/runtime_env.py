"""`RuntimeEnv` and `RuntimeEnvConfig`: dicts with Ray's constructor keywords and accessors."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

__all__ = ["RuntimeEnv", "RuntimeEnvConfig"]


class RuntimeEnvConfig(dict[str, Any]):
    """The `config` field of a runtime env: setup timeout, eager install, log files.

    >>> RuntimeEnvConfig(setup_timeout_seconds=60)
    {'setup_timeout_seconds': 60, 'eager_install': True, 'log_files': []}
    """

    def __init__(self, setup_timeout_seconds: int = 600, eager_install: bool = True,
                 log_files: list[str] | None = None) -> None:
        if not isinstance(setup_timeout_seconds, int) or isinstance(setup_timeout_seconds, bool):
            raise TypeError(f"setup_timeout_seconds must be of type int, got: {type(setup_timeout_seconds)}")
        if setup_timeout_seconds <= 0 and setup_timeout_seconds != -1:
            raise ValueError(f"setup_timeout_seconds must be -1 or greater than 0, got: {setup_timeout_seconds}")
        if not isinstance(eager_install, bool):
            raise TypeError(f"eager_install must be a boolean. got {type(eager_install)}")
        super().__init__(setup_timeout_seconds=setup_timeout_seconds, eager_install=eager_install,
                         log_files=list(log_files or []))

    @staticmethod
    def parse_and_validate_runtime_env_config(config: Mapping[str, Any] | RuntimeEnvConfig) -> RuntimeEnvConfig:
        """A RuntimeEnvConfig from a dict of its fields (TypeError for anything else)."""
        if isinstance(config, RuntimeEnvConfig):
            return config
        if isinstance(config, Mapping):
            return RuntimeEnvConfig(**config)
        raise TypeError(f"runtime_env['config'] must be of type dict or RuntimeEnvConfig, got: {type(config)}")


class RuntimeEnv(dict[str, Any]):
    """A runtime env: only the fields given are set (None means not given).

    >>> env = RuntimeEnv(working_dir=".", env_vars={"A": "1"})
    >>> sorted(env), env.working_dir()
    (['env_vars', 'working_dir'], '.')
    """

    def __init__(
        self,
        *,
        py_modules: list[str] | None = None,
        working_dir: str | None = None,
        pip: Any = None,
        conda: Any = None,
        container: Any = None,
        env_vars: Mapping[str, str] | None = None,
        worker_process_setup_hook: Any = None,
        nsight: Any = None,
        config: Mapping[str, Any] | RuntimeEnvConfig | None = None,
        uv: Any = None,
        image_uri: str | None = None,
        _validate: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__()
        fields = {
            "py_modules": py_modules, "working_dir": working_dir, "pip": pip, "conda": conda,
            "container": container, "env_vars": env_vars, "worker_process_setup_hook": worker_process_setup_hook,
            "nsight": nsight, "uv": uv, "image_uri": image_uri, **kwargs,
        }
        if config is not None:
            fields["config"] = RuntimeEnvConfig.parse_and_validate_runtime_env_config(config)
        for key, value in fields.items():
            if value is not None:
                self[key] = value
        if _validate and "pip" in self and "conda" in self:
            raise ValueError("The 'pip' field and 'conda' field of runtime_env cannot both be specified.")
        if _validate and env_vars is not None:
            if not isinstance(env_vars, Mapping) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in env_vars.items()
            ):
                raise TypeError("runtime_env['env_vars'] must be of type Dict[str, str]")

    # ---- accessors, as Ray's ----------------------------------------------------------------

    def working_dir(self) -> str:
        return str(self.get("working_dir", ""))

    def py_modules(self) -> list[str]:
        return list(self.get("py_modules") or [])

    def env_vars(self) -> dict[str, str]:
        return dict(self.get("env_vars") or {})

    def has_working_dir(self) -> bool:
        return bool(self.get("working_dir"))

    def has_py_modules(self) -> bool:
        return bool(self.get("py_modules"))

    def has_pip(self) -> bool:
        return self.get("pip") is not None

    def has_uv(self) -> bool:
        return self.get("uv") is not None

    def has_conda(self) -> bool:
        return self.get("conda") is not None

    def pip_config(self) -> dict[str, Any]:
        pip = self.get("pip")
        if pip is None:
            return {}
        if isinstance(pip, Mapping):
            return dict(pip)
        return {"packages": list(pip) if not isinstance(pip, str) else pip}

    def runtime_env_config(self) -> RuntimeEnvConfig:
        return RuntimeEnvConfig.parse_and_validate_runtime_env_config(self.get("config") or {})

    def to_dict(self) -> dict[str, Any]:
        return {key: (dict(value) if isinstance(value, RuntimeEnvConfig) else value) for key, value in self.items()}

    def serialize(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def deserialize(cls, serialized: str) -> RuntimeEnv:
        return cls(_validate=False, **json.loads(serialized))
