"""fray_ray: Ray's API on Iris clusters."""

__version__ = "0.1.0"
