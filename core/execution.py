"""Where independent tasks run: in this process, or on Dask's distributed scheduler.

One execution layer serves the suite's parallel work: the configurations of a sweep
(``relaxspec simulate``), the traces of ``relaxspec rescore`` and the image chunks of ``relaxspec mini
quality``. A scheduler is named by a string (:func:`check_scheduler`):

- ``"none"``: the tasks run one after another in this process (Dask is not imported);
- ``"local"``: a ``distributed.LocalCluster`` started here with one single-threaded worker process per
  usable core (``workers`` sets the number); fewer than two tasks run in this process instead;
- a Dask address such as ``"tcp://HOST:8786"``: a running cluster (``dask scheduler`` and ``dask worker``,
  or dask-jobqueue on Slurm / PBS: README, "Sweeps on many cores or a cluster"). An address that answers
  nothing is a ``ValueError`` after at most :data:`CONNECT_TIMEOUT_S` seconds.

:meth:`Executor.run` submits every task and yields ``(index, result)`` as tasks finish, so that the caller
stores each result at once (an interrupted run keeps every result it received). Large read-only inputs
are built once per cluster by :meth:`Executor.share` (a task of their own, e.g. loading a file on a worker)
and fetched once by each worker that needs them, never pickled into each task; Dask rebuilds one whose
holder died. A worker process that dies mid-task has its task run again on another worker by the
scheduler; a task that killed ``distributed.scheduler.allowed-failures`` + 1 workers (Dask's default
allows 3) is reported as :class:`TasksLost` once every other task has finished. An exception raised by
a task cancels the rest and is raised again here.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import socket
import threading
import uuid
from collections.abc import Callable, Coroutine, Iterator, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from distributed import LocalCluster, Worker

INLINE = "none"
LOCAL = "local"
CONNECT_TIMEOUT_S = 5.0  # a scheduler that does not answer within this is an error, not a hang
SCHEDULER_HELP = ("where tasks run: 'local' (a Dask LocalCluster on this machine, one worker process per "
                  "core), 'none' (this process, one task after another) or the address of a running Dask "
                  "scheduler, e.g. tcp://HOST:8786")


class TasksLost(OSError):
    """Tasks whose worker processes kept dying (killed by a signal or for memory): the results of every
    other task were delivered; running the command again redoes only these. An ``OSError``: a process
    died, as with other failures of the machine (the command line prints it on one line)."""


def add_scheduler_arguments(parser: argparse.ArgumentParser, default: str | None = LOCAL) -> None:
    """``--scheduler`` and ``--workers`` of a command whose tasks run through :class:`Executor`."""
    parser.add_argument("--scheduler", default=default, metavar="SCHEDULER",
                        help=SCHEDULER_HELP)
    parser.add_argument("--workers", type=int, default=None, metavar="N",
                        help="worker processes of --scheduler local (default: one per core)")


# Dask's nanny starts workers with MALLOC_TRIM_THRESHOLD_=65536, which turns off glibc's adaptive mmap
# threshold: every array of 128 KiB or more (a V = 16384 row) is then mmap-ed and unmapped again, and the
# Numba kernels run 2 to 3 times slower. Left unset, glibc keeps its defaults (the README's section on
# clusters says how to unset it for workers started by hand).
WORKER_CONFIG = {"distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None}


DASK_LOGGER = "distributed"  # the logger whose stream handler prints every Dask log line


class QuietCancellation(logging.Filter):
    """Drops the log lines Dask writes when tasks are cancelled on purpose (Ctrl-C, another task's error, a
    loop left early; :meth:`Executor.run` cancels what is unfinished): a worker's "Async instruction ...
    ended with CancelledError" and the nanny's "Worker process still alive after N seconds, killing" while a
    cluster closes under a running kernel. The command line then prints its one line alone; every other
    Dask line, and any error, passes."""

    NOISE = ("ended with CancelledError", "still alive after")

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.ERROR or not any(n in record.getMessage() for n in self.NOISE)


def quiet_cancellation(install: bool = True) -> None:
    """Add (or remove, ``install`` False) :class:`QuietCancellation` on the handlers of Dask's logger in this
    process (records of its child loggers reach those handlers)."""
    for handler in logging.getLogger(DASK_LOGGER).handlers:
        for f in [f for f in handler.filters if isinstance(f, QuietCancellation)]:
            handler.removeFilter(f)
        if install:
            handler.addFilter(QuietCancellation())


def _quiet_workers() -> object:
    """A Dask worker plugin that runs :func:`quiet_cancellation` in each worker process (built here, so
    that this module imports Dask only when a cluster is used)."""
    from distributed import WorkerPlugin

    class QuietWorkers(WorkerPlugin):
        name = "relaxspec-quiet-cancellation"

        def setup(self, worker: Worker) -> None:
            quiet_cancellation()

    return QuietWorkers()


def local_cluster(workers: int, **config: object) -> LocalCluster:
    """A ``distributed.LocalCluster`` of ``workers`` single-threaded worker processes on the loopback
    interface (its HTTP server on a free port, never a fixed one), with :data:`WORKER_CONFIG` and
    ``config`` (Dask settings, e.g. ``{"distributed.scheduler.allowed-failures": 1}``)."""
    import dask
    from distributed import LocalCluster

    with dask.config.set({**WORKER_CONFIG, **config}):
        return LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, host="127.0.0.1",
                            dashboard_address="127.0.0.1:0")


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity where the OS tells it)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def check_scheduler(scheduler: str) -> str:
    """``scheduler`` if it is ``"none"``, ``"local"`` or a Dask address ``SCHEME://HOST[:PORT]``; else a
    ``ValueError`` naming the three forms."""
    if not isinstance(scheduler, str):
        raise ValueError(f"scheduler must be a string, got {scheduler!r}")
    if scheduler in (INLINE, LOCAL):
        return scheduler
    parts = urlsplit(scheduler)
    if not parts.scheme or not (parts.netloc or parts.scheme == "inproc") or parts.path not in ("", "/"):
        raise ValueError(f"scheduler {scheduler!r} is not 'none', 'local' or a Dask scheduler address "
                         "such as tcp://HOST:8786")
    return scheduler


def check_reachable(address: str, timeout: float = CONNECT_TIMEOUT_S) -> None:
    """Raise a ``ValueError`` unless a Dask scheduler answers at ``address`` within ``timeout`` seconds.

    A ``tcp://`` or ``tls://`` address where nothing listens fails at once (Dask's client would retry
    until its timeout, then take as long again to close); then the scheduler must answer Dask's
    ``identity`` call (a server that is not a Dask scheduler is refused, not read as one)."""
    parts = urlsplit(address)
    hint = ("start one with `dask scheduler` and `dask worker` (README: Sweeps on many cores or a cluster), "
            "or use --scheduler local")
    try:
        if parts.scheme in ("tcp", "tls"):
            with socket.create_connection((parts.hostname, parts.port or 8786), timeout=timeout):
                pass
        reply = _in_thread(_identity(address, timeout))
    except Exception as err:  # any failure to talk to it (refused, timed out, not Dask's protocol)
        reason = " ".join(str(err).split()) or type(err).__name__
        raise ValueError(f"cannot reach the Dask scheduler at {address} ({reason}); {hint}") from err
    if not isinstance(reply, dict) or reply.get("type") != "Scheduler":
        raise ValueError(f"{address} answered, but not as a Dask scheduler; {hint}")


def _in_thread(coroutine: Coroutine[Any, Any, Any]) -> Any:
    """Run ``coroutine`` to its end on a new event loop in a new thread (this thread may already run a loop,
    as a Jupyter kernel does); return its result or raise its exception."""
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["result"] = asyncio.run(coroutine)
        except BaseException as err:  # handed to the caller's thread
            outcome["error"] = err

    thread = threading.Thread(target=target, name="dask-scheduler-probe", daemon=True)
    thread.start()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"]


async def _identity(address: str, timeout: float) -> object:
    """The reply of the Dask server at ``address`` to an ``identity`` message."""
    from distributed.comm import connect

    comm = await connect(address, timeout=timeout)
    try:
        await asyncio.wait_for(comm.write({"op": "identity", "reply": True}), timeout)
        return await asyncio.wait_for(comm.read(), timeout)
    finally:
        comm.abort()


class Executor:
    """Runs independent tasks in this process or on a Dask cluster (a context manager).

    Parameters
    ----------
    scheduler : str
        ``"none"``, ``"local"`` or a Dask scheduler address (:func:`check_scheduler`).
    workers : int, optional
        Worker processes of a ``"local"`` cluster (default: :func:`usable_cores`).
    tasks : int, optional
        How many tasks will run: a ``"local"`` cluster is not started for fewer than two.
    dashboard : bool
        Report the Dask dashboard's address (:attr:`dashboard_link`; a local cluster serves it on a free
        loopback port when bokeh is installed).
    connect_timeout : float
        Seconds to wait for a remote scheduler.
    """

    def __init__(self, scheduler: str = INLINE, workers: int | None = None, *, tasks: int | None = None,
                 dashboard: bool = False, connect_timeout: float = CONNECT_TIMEOUT_S) -> None:
        self.scheduler = check_scheduler(scheduler)
        if workers is not None:
            if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
                raise ValueError(f"workers must be a positive integer, got {workers!r}")
            if self.scheduler != LOCAL:
                raise ValueError(f"workers sets the size of a local cluster (--scheduler local); scheduler "
                                 f"{self.scheduler!r} has its own workers")
        if self.scheduler == LOCAL and tasks is not None and tasks < 2:
            self.scheduler = INLINE
        self.workers = workers
        self.dashboard = dashboard
        self.connect_timeout = float(connect_timeout)
        self.client = None
        self._cluster = None

    @property
    def inline(self) -> bool:
        """Whether tasks run in this process."""
        return self.scheduler == INLINE

    def __enter__(self) -> Executor:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        """Start the local cluster or connect to the scheduler (nothing for ``"none"``)."""
        if self.inline or self.client is not None:
            return
        from distributed import Client

        if self.scheduler == LOCAL:
            self._cluster = local_cluster(self.workers or usable_cores())
            self.client = Client(self._cluster, set_as_default=False)
            quiet_cancellation()  # this process runs the scheduler and the nannies
            self.client.register_plugin(_quiet_workers())
            return
        check_reachable(self.scheduler, self.connect_timeout)
        self.client = Client(self.scheduler, timeout=self.connect_timeout, set_as_default=False)

    def close(self) -> None:
        """Disconnect, and stop a cluster this executor started."""
        client, cluster, self.client, self._cluster = self.client, self._cluster, None, None
        if client is not None:
            client.close()
        if cluster is not None:
            cluster.close()
            quiet_cancellation(install=False)

    @property
    def dashboard_link(self) -> str | None:
        """The Dask dashboard's address, when one is up (with ``dashboard``; a local one needs bokeh)."""
        if not self.dashboard or self.client is None:
            return None
        if "dashboard" not in self.client.scheduler_info().get("services", {}):
            return None
        if self.scheduler == LOCAL and not _has_bokeh():
            return None
        return self.client.dashboard_link

    def describe(self) -> str:
        """Where the tasks run, in words (with the dashboard's address when one is up)."""
        if self.inline:
            return "in this process"
        n = len(self.client.scheduler_info().get("workers", {})) if self.client is not None else 0
        where = "a local Dask cluster" if self.scheduler == LOCAL else f"the Dask scheduler {self.scheduler}"
        link = self.dashboard_link
        return f"on {where} ({n} workers{f'; dashboard {link}' if link else ''})"

    def share(self, build: Callable[..., Any], *args: Any) -> Any:
        """A large read-only input for tasks: ``build(*args)`` run once, here (``"none"``) or as a task on
        the cluster (a future that :meth:`run`'s arguments may hold; each worker fetches its value once,
        and Dask builds it again if the worker holding it dies)."""
        if self.inline:
            return build(*args)
        self.start()
        return self.client.submit(build, *args, key=_task_key(build, "shared"), pure=False)

    def run(self, fn: Callable[..., Any], calls: Sequence[tuple], labels: Sequence[str] | None = None,
            ) -> Iterator[tuple[int, Any]]:
        """Call ``fn(*calls[i])`` for every i; yield ``(i, result)`` as calls finish (in order for
        ``"none"``, in completion order on a cluster).

        ``labels`` name the calls in :class:`TasksLost`. An exception raised by a call is raised here (on a
        cluster, after the calls not yet finished are cancelled); leaving the loop early cancels them too.
        """
        calls = [tuple(c) for c in calls]
        if labels is not None and len(labels) != len(calls):
            raise ValueError(f"{len(labels)} labels for {len(calls)} calls")
        if self.inline:
            for i, args in enumerate(calls):
                yield i, fn(*args)
            return
        if not calls:
            return
        if len({len(c) for c in calls}) != 1:
            raise ValueError("every call must have the same number of arguments")
        from distributed import as_completed
        from distributed.client import FutureCancelledError
        from distributed.scheduler import KilledWorker

        self.start()
        token = uuid.uuid4().hex
        keys = [f"{fn.__name__}-{token}-{i}" for i in range(len(calls))]
        futures = self.client.map(fn, *zip(*calls, strict=True), key=keys, pure=False)
        index = {f.key: i for i, f in enumerate(futures)}
        lost: list[str] = []
        try:
            for future in as_completed(futures, loop=self.client.loop):
                i = index[future.key]
                try:
                    result = future.result()
                except KilledWorker as err:
                    lost.append(f"{_label(labels, i)} ({err.allowed_failures + 1} workers died running it, "
                                f"the last {err.last_worker.address})")
                    continue
                except FutureCancelledError as err:
                    lost.append(f"{_label(labels, i)} (cancelled: {' '.join(str(err).split())})")
                    continue
                future.release()
                yield i, result
        finally:
            self.client.cancel([f for f in futures if not f.done()])
        if lost:
            raise TasksLost(f"{len(lost)} of {len(calls)} tasks lost, their worker processes died (killed by "
                            "a signal or for memory); every other result was kept, and running the same "
                            "command again runs only these: " + "; ".join(lost))


def _label(labels: Sequence[str] | None, i: int) -> str:
    return labels[i] if labels is not None else f"task {i}"


def _task_key(fn: Callable[..., Any], kind: str) -> str:
    return f"{kind}-{getattr(fn, '__name__', 'call')}-{uuid.uuid4().hex}"


def _has_bokeh() -> bool:
    import importlib.util

    return importlib.util.find_spec("bokeh") is not None
