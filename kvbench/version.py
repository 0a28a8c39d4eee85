"""The package's version, in a module of its own so that modules the package root re-exports can read it."""

__version__ = "0.1.0"
