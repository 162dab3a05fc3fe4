"""Moving, checking and deleting single files through a table's FileIO (local and object stores).

``FileMover`` is the only code that touches orphan files. With PyIceberg's ``PyArrowFileIO`` it
uses the pyarrow FileSystem the FileIO built (with the catalog's credentials): ``move`` is a
rename on a local disk and a server-side copy then delete on S3 (so a crash between the two
leaves both copies, which ``quarantine`` recognises by size). Any other FileIO falls back to
streaming the bytes through ``new_input``/``new_output`` and ``delete``.

All methods block; callers run them in a thread.
"""

from __future__ import annotations

import posixpath
import shutil

from pyarrow import fs as pafs
from pyiceberg.io import FileIO
from pyiceberg.io.pyarrow import PyArrowFileIO

COPY_CHUNK = 8 * 1024 * 1024


class FileMover:
    """File operations on ``io``; paths are the URIs (or local paths) the table uses."""

    def __init__(self, io: FileIO) -> None:
        self.io = io

    def _fs(self, location: str) -> tuple[pafs.FileSystem, str] | None:
        if not isinstance(self.io, PyArrowFileIO):
            return None
        scheme, netloc, path = self.io.parse_location(location, self.io.properties)
        return self.io.fs_by_scheme(scheme, netloc), path

    def size(self, location: str) -> int | None:
        """The file's size in bytes; None when there is no file at ``location``."""
        native = self._fs(location)
        if native is not None:
            fs, path = native
            info = fs.get_file_info(path)
            if info.type != pafs.FileType.File:
                return None
            return int(info.size) if info.size is not None else 0
        stream = self.io.new_input(location)
        return len(stream) if stream.exists() else None

    def move(self, source: str, target: str) -> None:
        """Move one file to ``target`` (created with its parents; replaced if it exists).

        Raises:
            FileNotFoundError: no file at ``source``.
            OSError: the store refused (the message names the path).
        """
        native = self._fs(source)
        if native is not None:
            fs, src = native
            target_native = self._fs(target)
            assert target_native is not None
            _, dst = target_native
            if fs.type_name == "local":
                # A rename needs the directory; object stores have no directories to make.
                fs.create_dir(posixpath.dirname(dst), recursive=True)
            fs.move(src, dst)
            return
        with (
            self.io.new_input(source).open() as reader,
            self.io.new_output(target).create(overwrite=True) as writer,
        ):
            shutil.copyfileobj(reader, writer, COPY_CHUNK)
        self.io.delete(source)

    def same_bytes(self, first: str, second: str) -> bool:
        """Whether two files hold exactly the same bytes (read in chunks, compared as read)."""
        with self.io.new_input(first).open() as a, self.io.new_input(second).open() as b:
            while True:
                chunk = a.read(COPY_CHUNK)
                if chunk != b.read(COPY_CHUNK):
                    return False
                if not chunk:
                    return True

    def delete(self, location: str) -> bool:
        """Delete one file; False when there was none."""
        try:
            self.io.delete(location)
        except FileNotFoundError:
            return False
        return True
