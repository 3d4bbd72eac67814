"""Op families; importing this package registers every op in the registry."""
from . import control, core, khr  # noqa: F401
