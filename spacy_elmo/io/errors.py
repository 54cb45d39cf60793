"""The error every loader raises for a missing, corrupt or mismatching model file."""

from pathlib import Path
from typing import Union


class ModelFileError(ValueError):
    """A model file is missing, unreadable, or does not match its configuration."""

    def __init__(self, path: Union[str, Path], problem: str) -> None:
        self.path = str(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")
