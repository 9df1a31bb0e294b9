"""Writing to disk so that a kill at any moment leaves the old or the new, never neither.

Exports, trims and fetches are built in a scratch folder beside their target
(`.NAME.partial-XXXX`) and renamed into place. A folder cannot be renamed over a
non-empty one, so a replacement moves the old one aside first (`.NAME.old-PID`),
renames the new one in, then removes the old. A process killed in between leaves
debris that the next run over the same target cleans up: scratch older than a
day is removed, and an old folder whose replacement never arrived is put back.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Callable, Iterator

STALE_S = 24 * 3600  # a scratch folder this old belongs to no running process


def scratch_beside(target: Path, prefix: str | None = None) -> Path:
    """A new scratch folder next to `target` (same file system: the final rename is atomic),
    after sweeping what killed runs left there."""
    target = Path(target)
    sweep(target, prefix)
    return Path(tempfile.mkdtemp(prefix=prefix or f".{target.name}.partial-", dir=target.resolve().parent))


def sweep(target: Path, prefix: str | None = None) -> None:
    """Remove scratch folders of `target` older than a day; restore an old `target` that a
    killed replacement moved aside, or remove it if the new one made it into place."""
    target = Path(target)
    parent = target.resolve().parent
    if not parent.is_dir():
        return
    now = time.time()
    for p in parent.glob(f"{prefix or f'.{target.name}.partial-'}*"):
        with contextlib.suppress(OSError):
            if now - p.lstat().st_mtime > STALE_S:
                shutil.rmtree(p) if p.is_dir() else p.unlink()
    for old in parent.glob(f".{target.name}.old-*"):
        if _alive(old.name.rsplit("-", 1)[-1]):
            continue  # its replacement is under way in another process
        with contextlib.suppress(OSError):
            if target.exists():
                shutil.rmtree(old)
            else:
                os.replace(old, target)


def _alive(pid: str) -> bool:
    try:
        os.kill(int(pid), 0)
    except (ValueError, ProcessLookupError):
        return False
    except PermissionError:
        return True
    return int(pid) != os.getpid()


def replace_folder(new: Path, target: Path) -> None:
    """Put folder `new` at `target`: the old one renamed aside, the new one renamed in, the
    old one removed. A kill between the renames is undone by the next sweep(target)."""
    old = None
    if target.exists():
        old = target.with_name(f".{target.name}.old-{os.getpid()}")
        os.replace(target, old)
    os.replace(new, target)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


@contextlib.contextmanager
def locked(target: Path) -> Iterator[None]:
    """Hold an exclusive lock on `target` (a `.lock` file beside it) for the block: two
    processes fetching or trimming the same model take turns instead of racing. The
    holder removes the file before letting go, so none is left behind; a waiter that
    then finds it gone, or replaced, locks again."""
    import fcntl

    lock = Path(target).with_name(Path(target).name + ".lock")
    lock.parent.mkdir(parents=True, exist_ok=True)
    while True:
        f = open(lock, "a")
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            if os.stat(lock).st_ino == os.fstat(f.fileno()).st_ino:
                break
        except FileNotFoundError:
            pass
        f.close()  # the holder removed it as it let go: lock the new one
    try:
        yield
    finally:
        lock.unlink(missing_ok=True)
        f.close()  # closing releases the lock


def write_json(path: Path, value: object) -> bool:
    """Write JSON through a name of this process's own, renamed into place; False if the
    folder is not writable (a cache: the value is simply computed again next time)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(value))
        os.replace(tmp, path)
        return True
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()
        return False


def forget_gone(folder: Path, path_of: Callable[[dict], str]) -> None:
    """Remove the JSON records in `folder` whose file (`path_of(record)`) no longer exists: a
    record kept per checked file would otherwise outlive every temporary file it describes."""
    for record in Path(folder).glob("*.json"):
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            if not Path(path_of(json.loads(record.read_text()))).exists():
                record.unlink()


def sha256_file(path: Path, progress: Callable[[int], None] | None = None) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
            if progress:
                progress(len(chunk))
    return h.hexdigest()
