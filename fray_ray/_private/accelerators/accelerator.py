"""`AcceleratorManager`: the static methods every accelerator manager answers, as in Ray."""

from __future__ import annotations

import os
from abc import ABC, abstractmethod


class AcceleratorManager(ABC):
    """What Ray asks of one kind of accelerator on the current host. Every method is static."""

    @staticmethod
    @abstractmethod
    def get_resource_name() -> str:
        """The resource the accelerator is requested by (`GPU`, `TPU`)."""

    @staticmethod
    @abstractmethod
    def get_visible_accelerator_ids_env_var() -> str:
        """The environment variable that lists the devices a process may use."""

    @staticmethod
    @abstractmethod
    def get_current_node_num_accelerators() -> int:
        """How many of these accelerators this host has (0 if none)."""

    @staticmethod
    @abstractmethod
    def get_current_node_accelerator_type() -> str | None:
        """The accelerator type this host advertises (`accelerator_type=`), or None."""

    @staticmethod
    def get_current_node_additional_resources() -> dict[str, float] | None:
        """Resources this host has besides the accelerator itself; None when there are none."""
        return None

    @staticmethod
    def get_current_node_accelerator_labels() -> dict[str, str]:
        """Node labels this host has for its accelerators."""
        return {}

    @staticmethod
    def validate_resource_request_quantity(quantity: float) -> tuple[bool, str | None]:
        """Whether a task may ask for `quantity` of the accelerator, and why not if it may not."""
        return True, None

    @classmethod
    def get_current_process_visible_accelerator_ids(cls) -> list[str] | None:
        """The device ids this process may use, from its environment; None when it is not set."""
        visible = os.environ.get(cls.get_visible_accelerator_ids_env_var())
        if visible is None:
            return None
        return [device for device in visible.split(",") if device.strip()]

    @classmethod
    def set_current_process_visible_accelerator_ids(cls, ids: list[str]) -> None:
        """Limit this process (and what it starts) to the devices `ids`."""
        os.environ[cls.get_visible_accelerator_ids_env_var()] = ",".join(str(i) for i in ids)
