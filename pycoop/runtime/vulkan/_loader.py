"""Lazy import of pyvulkan: its import dlopens libvulkan and raises OSError without a loader."""
from __future__ import annotations

from types import ModuleType

from .errors import VulkanUnavailable


def load_vulkan() -> ModuleType:
    """Return the `vulkan` module, or raise VulkanUnavailable saying why it can't load."""
    try:
        import vulkan
    except ImportError as exc:
        raise VulkanUnavailable(f"pyvulkan is not installed ({exc}); pip install vulkan") from None
    except OSError as exc:
        raise VulkanUnavailable(
            f"no Vulkan loader (libvulkan) found: {exc}. On Debian: apt-get install libvulkan1 "
            "mesa-vulkan-drivers") from None
    return vulkan
