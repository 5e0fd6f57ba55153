"""IndexFile: the file bookkeeping every segment index shares (delete, rename, move)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path

from tidelog.storage import fileops


class IndexFile(ABC):
    """An index backed by one file at ``self._path``; subclasses say how to let go of it."""

    _path: Path

    @abstractmethod
    def _release(self) -> None:
        """Drop maps or descriptors on the file (before it is deleted)."""

    def delete_if_exists(self) -> bool:
        """Release the file, then delete it; returns whether a file was deleted."""
        self._release()
        try:
            fileops.unlink(self._path)
        except FileNotFoundError:
            return False
        return True

    def rename_to(self, new_path: Path) -> None:
        """Rename the file (also while mapped or open); a missing file only changes the recorded path."""
        new_path = Path(new_path)
        if self._path.exists():
            fileops.rename(self._path, new_path)
        self._path = new_path

    def update_parent_dir(self, parent_dir: Path) -> None:
        """Record that the file now lives in ``parent_dir`` (the directory was renamed)."""
        self._path = Path(parent_dir) / self._path.name
