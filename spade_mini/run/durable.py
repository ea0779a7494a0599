"""Writes that a kill, a full disk or a power cut cannot leave half done, and the manifest that
lets a reader trust a folder of files.

    replace_text(path, text)  write a temporary sibling, fsync it, rename it over `path`
    append_text(path, text)   append and fsync; a write the disk refuses is cut off again
    publish(tmp, final)       fsync every file of `tmp`, write MANIFEST (each file's size and
                              sha256), fsync the folder, rename it to `final`, fsync its parent
    damage(folder)            None, or what is wrong with a published folder, in a few words
    WriteError                a write the disk refused, naming the path

A reader therefore sees a file either as it was or as it is now, and a published folder either
whole or not at all; a file changed or cut short after publishing (a bad disk, a copy that
stopped) is caught by its checksum. Omitted: checksums of the run's own logs (metrics, samples),
which are appended every iteration and whose damage `--resume` truncates away, and streaming
the checksum while a library writes (each file is read back once instead: page cache, cheap).
"""
from __future__ import annotations

import hashlib
import json
import os
from contextlib import contextmanager
from pathlib import Path

MANIFEST = "manifest.json"
CHUNK_BYTES = 1 << 20


class WriteError(Exception):
    """A write the disk refused (full, or over a size limit); the message names the path."""


@contextmanager
def writing(path: Path, also: tuple[type[Exception], ...] = ()):
    """Turn a refused write under `path` into a WriteError. `also`: the errors that a library
    raises instead of OSError when the disk refuses its write (torch and safetensors do)."""
    try:
        yield
    except (OSError, *also) as e:
        why = e.strerror if isinstance(e, OSError) and e.strerror else str(e).splitlines()[0]
        raise WriteError(f"could not write {path} ({why})") from None


def fsync_folder(folder: Path) -> None:
    """Make the entries of `folder` (new names, renames) durable."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def replace_text(path: Path, text: str) -> None:
    """Replace `path` with `text` all at once: a reader sees the old file or the new one."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with writing(path):
            with open(tmp, "w", encoding="utf-8") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def append_text(path: Path, text: str) -> None:
    """Append `text` and fsync. If the disk refuses part of it, the file is cut back to its old
    end, so every line in it stays whole."""
    data = memoryview(text.encode("utf-8"))
    with writing(path), open(path, "ab", buffering=0) as f:
        end = f.seek(0, os.SEEK_END)
        try:
            while data:  # an unbuffered write may take only part of it
                data = data[f.write(data):]
            os.fsync(f.fileno())
        except OSError:
            f.truncate(end)  # shortening needs no space
            raise


def _digest(path: Path, sync: bool = False) -> tuple[int, str]:
    """(bytes, sha256) of a file, read in chunks; with `sync`, also fsync it while it is open
    (which flushes what its writer left in the page cache)."""
    sha = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK_BYTES):
            sha.update(chunk)
        if sync:
            os.fsync(f.fileno())
        return f.tell(), sha.hexdigest()


def publish(tmp: Path, final: Path) -> None:
    """Rename the finished folder `tmp` to `final` (which must not exist) once every byte of it is
    on disk, with a MANIFEST of what it holds. Raises OSError as the disk does."""
    files = sorted(p for p in tmp.rglob("*") if p.is_file())
    manifest = {}
    for path in files:
        size, sha = _digest(path, sync=True)
        manifest[path.relative_to(tmp).as_posix()] = {"bytes": size, "sha256": sha}
    with open(tmp / MANIFEST, "w", encoding="utf-8") as f:
        json.dump({"files": manifest}, f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    for folder in sorted({p.parent for p in files} | {tmp}, key=lambda p: -len(p.parts)):
        fsync_folder(folder)
    os.replace(tmp, final)
    fsync_folder(final.parent)


def damage(folder: Path) -> str | None:
    """None when every file in the folder's MANIFEST has its recorded size and checksum;
    otherwise the first problem, e.g. "trainable.safetensors holds 100 bytes, not 59496"."""
    try:
        files = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return f"its {MANIFEST} is missing or unreadable"
    for name, want in files.items():
        path = folder / name
        if not path.is_file():
            return f"{name} is missing"
        size = path.stat().st_size
        if size != want["bytes"]:
            return f"{name} holds {size} bytes, not {want['bytes']}"
        if _digest(path)[1] != want["sha256"]:
            return f"{name} does not match its checksum"
    return None
