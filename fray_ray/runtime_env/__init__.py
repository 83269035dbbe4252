"""`ray.runtime_env`: `RuntimeEnv` and `RuntimeEnvConfig`, typed forms of a runtime_env dict.

Both are dicts, so they go wherever a runtime_env dict goes (`init(runtime_env=...)`,
`.options(runtime_env=...)`) and are checked there (fields fray_ray cannot honour, such as
`conda`, raise `ValueError` naming the key at that point).

>>> from fray_ray.runtime_env import RuntimeEnv
>>> RuntimeEnv(env_vars={"MODE": "test"}).env_vars()
{'MODE': 'test'}
"""

from fray_ray.runtime_env.runtime_env import RuntimeEnv, RuntimeEnvConfig

__all__ = ["RuntimeEnv", "RuntimeEnvConfig"]
