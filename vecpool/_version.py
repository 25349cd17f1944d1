"""The package version (read by the build backend and ``vecpool --version``)."""

__version__ = "0.1.0"
