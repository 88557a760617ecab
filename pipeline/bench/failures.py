"""Typed failures of a measurement (shared by the worker, its backends and the parent)."""

from __future__ import annotations


class LaunchFailure(Exception):
    """A fault that kills the device context (illegal address, trap): the worker must restart."""


class WorkerFailure(Exception):
    """The worker died or hung while serving a request; ``status`` is 'launch' or 'timeout'."""

    def __init__(self, status: str, message: str):
        super().__init__(message)
        self.status = status
