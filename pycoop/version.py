"""pycoop's version: part of every cache key and exported sidecar."""
__version__ = "0.1.0"
