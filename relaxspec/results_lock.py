"""One writer of a results CSV (:class:`ResultsLock`) and whole lines appended to it (:func:`append_line`):
how a sweep writes the file :mod:`relaxspec.results` defines, so that a crash leaves it whole or with a
torn last line, never interleaved rows."""

from __future__ import annotations

import fcntl
import os
import stat
from pathlib import Path

from relaxspec.results import check_results_path, not_regular

LOCK_ATTEMPTS = 3  # locks taken while the file was replaced or removed (ResultsLock) before giving up


def _named(err: OSError, path: Path) -> OSError:
    """``err`` naming ``path`` when it names no file (``os.write``'s ``No space left on device``), so
    that the message says which file and why."""
    if err.filename is not None or err.errno is None:
        return err
    return OSError(err.errno, err.strerror or str(err), os.fspath(path))


class ResultsLock:
    """The one writer of a results CSV: an exclusive ``flock`` on the file, taken without waiting (a
    second sweep writing the same file gets a ``ValueError`` at once).

    What is at ``path`` is checked before it is opened (:func:`check_results_path`) and again once open
    (``fstat``); a new path is created empty (its folder too) and removed again if nothing was written
    to it (:meth:`release`, which is why a lock taken on a file that was then removed is taken again). The
    lock is on the file itself, so no lock file is left beside it and the lock ends with the process
    however it ends.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.created = False
        self.fd = self._acquire()

    def _acquire(self) -> int:
        flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC  # O_NONBLOCK: opening a FIFO does not wait
        for _ in range(LOCK_ATTEMPTS):
            if not check_results_path(self.path):
                self.path.parent.mkdir(parents=True, exist_ok=True)
            try:
                fd = os.open(self.path, flags | os.O_CREAT | os.O_EXCL, 0o666)
                self.created = True
            except FileExistsError:
                fd = os.open(self.path, flags)
            try:
                st = os.fstat(fd)
                if not stat.S_ISREG(st.st_mode):
                    raise ValueError(not_regular(self.path, st.st_mode))
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    raise ValueError(f"{self.path} is locked: another sweep is writing it; let it finish or "
                                     "choose another file") from None
                if self._names(st):
                    return fd
            except BaseException:
                os.close(fd)
                raise
            os.close(fd)  # the file was replaced or removed while it was being locked: lock what is there now
        raise ValueError(f"{self.path} was replaced {LOCK_ATTEMPTS} times while it was being locked; "
                         "is another program rewriting it?")

    def _names(self, st: os.stat_result) -> bool:
        """Whether ``path`` still names the open file ``st``."""
        try:
            now = os.stat(self.path)
        except FileNotFoundError:
            return False
        return (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino)

    def release(self) -> None:
        """Unlock; a file this lock created and nobody wrote to is removed."""
        if self.fd < 0:
            return
        try:
            if self.created and os.fstat(self.fd).st_size == 0:
                self.path.unlink(missing_ok=True)
        finally:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> ResultsLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def append_line(path: Path, text: str) -> None:
    """Append ``text`` (whole lines) with one ``os.write`` and sync it: a crash leaves it whole or torn at
    the end, never interleaved."""
    data = text.encode("utf-8")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    try:
        done = os.write(fd, data)
        while done < len(data):  # a regular file takes it at once; finish a short write all the same
            done += os.write(fd, data[done:])
        os.fsync(fd)
    except OSError as err:  # a full disk: name the file (os.write's error does not)
        raise _named(err, path) from err
    finally:
        os.close(fd)
