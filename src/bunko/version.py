"""The version of bunko (re-exported as ``bunko.__version__``); imports nothing, so any module may read it."""

__version__ = "0.1.0"
