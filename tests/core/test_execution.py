"""The execution layer (issue 16): sweeps, rescoring and image generation on Dask's distributed scheduler.

Each test that starts Dask workers first runs its work in this process, so that the workers load the
Numba kernels from the on-disk cache instead of compiling them. Clusters are local, loopback only, one
thread per worker, with no fixed ports.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from distributed import Client, WorkerPlugin

from relaxspec.cli import main
from relaxspec.core.execution import Executor, TasksLost, check_reachable, check_scheduler, local_cluster
from relaxspec.results import COLUMNS, config_key, load, read_done, read_results
from relaxspec.sweep import SweepConfig, jobs, run_sweep

# these tests read a simulate command's stderr line by line: no cold-cache compile notice
pytestmark = pytest.mark.usefixtures("simulator_kernels")

ROOT = Path(__file__).resolve().parents[2]
GRID = {
    "worlds": ["ambiguous", "confident"],
    "trees": ["chain:3", "eagle2:4,2,12", "sequoia:6,3"],
    "verifications": ["r1", "r1+lantern:k=50,delta=0.2", "r1+lantern++:k=50,lam=2"],
    "temperatures": [1.0, 0.8],
    "n_sequences": 4,
    "seq_len": 64,
    "seed": 3,
    "world_overrides": {"vocab_size": 1024, "n_clusters": 64},
    "sequoia": {"width": 4, "n_sequences": 2, "seq_len": 8},
}
N_CONFIGS = 2 * 3 * 3 * 2
WAIT_S = 300  # generous: CI runs on 2 shared cores


def _comparable(rows: list[dict]) -> dict[str, dict]:
    """Rows by configuration key, without the timing column; each key once."""
    out = {config_key(r): {c: v for c, v in r.items() if c != "seconds"} for r in rows}
    assert len(out) == len(rows), "a configuration appears twice"
    return out


def _toml(cfg: dict) -> str:
    """A sweep config dict as TOML (the few value types GRID uses)."""
    def value(v: object) -> str:
        return "[" + ", ".join(value(x) for x in v) + "]" if isinstance(v, list) else \
            f'"{v}"' if isinstance(v, str) else str(v)
    lines = [f"{k} = {value(v)}" for k, v in cfg.items() if not isinstance(v, dict)]
    for k, v in cfg.items():
        if isinstance(v, dict):
            lines += [f"[{k}]"] + [f"{kk} = {value(vv)}" for kk, vv in v.items()]
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def serial(tmp_path_factory) -> dict[str, dict]:
    """GRID run in this process (it also fills the Numba cache the workers load): rows by key."""
    out = tmp_path_factory.mktemp("serial") / "serial.csv"
    rows = run_sweep(SweepConfig.from_dict(GRID), out, progress=False)
    assert len(rows) == N_CONFIGS
    return _comparable(read_results(out))


# ------------------------------------------------------------------ the layer
def test_scheduler_names_and_worker_counts_are_checked() -> None:
    assert check_scheduler("tcp://10.0.0.1:8786") == "tcp://10.0.0.1:8786"
    for bad in ("foo", "tcp://", "local:2", "", "tcp://host:8786/path"):
        with pytest.raises(ValueError, match="not 'none', 'local' or a Dask scheduler address"):
            check_scheduler(bad)
    with pytest.raises(ValueError, match="workers sets the size of a local cluster"):
        Executor("none", workers=2)
    with pytest.raises(ValueError, match="workers sets the size of a local cluster"):
        Executor("tcp://127.0.0.1:8786", workers=2)
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="workers must be a positive integer"):
            Executor("local", workers=bad)
    assert Executor("local", tasks=1).inline and not Executor("local", tasks=2).inline


def test_in_process_runs_calls_in_order_and_builds_shared_inputs_once() -> None:
    built = []

    def build(n: int) -> np.ndarray:
        built.append(n)
        return np.arange(n)

    with Executor("none") as ex:
        table = ex.share(build, 5)
        got = list(ex.run(lambda t, i: int(t[i]), [(table, i) for i in (4, 0, 2)]))
        assert list(ex.run(len, [])) == []
        with pytest.raises(ValueError, match="2 labels for 1 calls"):
            list(ex.run(len, [("x",)], labels=["a", "b"]))
    assert got == [(0, 4), (1, 0), (2, 2)] and built == [5]
    assert ex.describe() == "in this process"


def _listen(reply: bytes) -> tuple[socket.socket, threading.Thread]:
    """A TCP server on a free loopback port that answers every connection with ``reply`` and closes it."""
    server = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                conn.sendall(reply)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return server, thread


def test_an_unreachable_scheduler_is_a_one_line_error_within_seconds(tmp_path, capsys) -> None:
    cfg = tmp_path / "grid.toml"
    cfg.write_text(_toml({**GRID, "trees": ["chain:3"]}))
    out = tmp_path / "r.csv"
    t0 = time.perf_counter()
    assert main(["simulate", str(cfg), "--results", str(out), "--scheduler", "tcp://127.0.0.1:1",
                 "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert time.perf_counter() - t0 < 30  # refused at once; the bound allows a loaded machine
    assert err.count("\n") == 1 and err.startswith("relaxspec: error: cannot reach the Dask scheduler at "
                                                   "tcp://127.0.0.1:1") and "dask scheduler" in err
    assert not out.exists()
    # something listens there, but it is not a Dask scheduler: refused, not read as one
    server, _ = _listen(b"HTTP/1.0 400 Bad Request\r\n\r\n" + b"x" * 64)
    try:
        address = f"tcp://127.0.0.1:{server.getsockname()[1]}"
        t0 = time.perf_counter()
        with pytest.raises(ValueError, match=f"cannot reach the Dask scheduler at {address}"):
            check_reachable(address, timeout=3)
        assert time.perf_counter() - t0 < 30
    finally:
        server.close()
    assert main(["simulate", str(cfg), "--results", str(out), "--scheduler", "foo"]) == 2
    assert "scheduler 'foo' is not 'none', 'local'" in capsys.readouterr().err


def _where(table: np.ndarray, i: int) -> tuple[int, int]:
    """A task: an entry of a shared table and the worker's process id."""
    if i == 99:
        raise ValueError("task 99 refuses")
    return int(table[i]), os.getpid()


def test_shared_inputs_reach_each_worker_once_and_task_errors_are_raised() -> None:
    with Executor("local", workers=2) as ex:
        assert ex.describe().startswith("on a local Dask cluster (2 workers")
        table = ex.share(np.arange, 2_000_000)
        got = dict(ex.run(_where, [(table, i) for i in range(12)], labels=[f"t{i}" for i in range(12)]))
        assert sorted(v[0] for v in got.values()) == list(range(12))
        # the table was built once, by a task, and fetched at most once by each worker
        fetched = ex.client.run(lambda dask_worker: [k for e in dask_worker.transfer_incoming_log
                                                     for k in e["keys"]])
        assert all(keys.count(table.key) <= 1 for keys in fetched.values()), fetched
        if len({pid for _, pid in got.values()}) == 2:  # both workers ran tasks: one fetched it
            assert sum(keys.count(table.key) for keys in fetched.values()) == 1, fetched
        with pytest.raises(ValueError, match="task 99 refuses"):
            list(ex.run(_where, [(table, 99)] + [(table, i) for i in range(3)]))


# ------------------------------------------------------------------ sweeps
def test_a_sweep_gives_the_same_rows_serially_and_on_one_and_two_workers(tmp_path, serial) -> None:
    cfg = SweepConfig.from_dict(GRID)
    for workers in (1, 2):
        out = tmp_path / f"w{workers}.csv"
        rows = run_sweep(cfg, out, progress=False, scheduler="local", workers=workers)
        assert len(rows) == N_CONFIGS
        assert _comparable(read_results(out)) == serial
        assert run_sweep(cfg, out, progress=False, scheduler="local", workers=workers) == []


class KillFirstTask(WorkerPlugin):
    """Kills its worker process (``os._exit``) when the first task of a run starts executing, ``times``
    times: the state is in files under ``folder`` (which task is first, how many kills so far), so that
    the workers the nanny restarts carry it on."""

    name = "kill-first-task"

    def __init__(self, folder: str, times: int) -> None:
        self.folder, self.times = folder, times

    def transition(self, key: str, start: str, finish: str, **kwargs: object) -> None:
        if finish != "executing" or not str(key).startswith("run_job-"):
            return
        first = os.path.join(self.folder, "first")
        try:
            fd = os.open(first, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            os.write(fd, str(key).encode())
            os.close(fd)
        except FileExistsError:
            pass
        with open(first) as f:
            if f.read() != str(key):
                return
        kills = len([n for n in os.listdir(self.folder) if n.startswith("kill")])
        if kills < self.times:
            open(os.path.join(self.folder, f"kill{kills}"), "w").close()
            os._exit(1)


def test_a_worker_killed_mid_task_loses_no_row(tmp_path, serial) -> None:
    """A task whose worker dies runs again elsewhere; one that kills too many workers is reported, with
    every other row kept, and the rerun computes only it."""
    cfg = SweepConfig.from_dict(GRID)
    cluster = local_cluster(2, **{"distributed.scheduler.allowed-failures": 1})
    try:
        with Client(cluster, set_as_default=False) as client:
            once, always = tmp_path / "once", tmp_path / "always"
            once.mkdir()
            always.mkdir()
            client.register_plugin(KillFirstTask(str(once), times=1))
            out = tmp_path / "retried.csv"
            rows = run_sweep(cfg, out, progress=False, scheduler=cluster.scheduler_address)
            assert (once / "kill0").exists(), "no worker was killed: the test tested nothing"
            assert len(rows) == N_CONFIGS and _comparable(read_results(out)) == serial
            # a task that kills every worker it runs on (2 = allowed failures + 1): reported, not retried.
            # Dask counts a death against every task the worker held, so a few others may be lost with it.
            client.register_plugin(KillFirstTask(str(always), times=10))
            out = tmp_path / "lost.csv"
            with pytest.raises(TasksLost, match=r"of 36 tasks lost.*2 workers died running it") as lost:
                run_sweep(cfg, out, progress=False, scheduler=cluster.scheduler_address)
            n_lost = int(str(lost.value).split(" of ")[0])
            assert sorted(p.name for p in always.iterdir()) == ["first", "kill0", "kill1"]
            kept = _comparable(read_results(out))
            assert 1 <= n_lost == N_CONFIGS - len(kept) and all(serial[k] == row for k, row in kept.items())
            client.unregister_worker_plugin(KillFirstTask.name)
            again = run_sweep(cfg, out, progress=False, scheduler=cluster.scheduler_address)
            assert len(again) == n_lost and _comparable(read_results(out)) == serial
    finally:
        cluster.close()


def test_killing_the_client_mid_sweep_loses_and_repeats_no_row(tmp_path, serial) -> None:
    """`relaxspec simulate --scheduler local` killed (SIGKILL) after a few rows, then run again: every
    configuration once, with the serial run's numbers."""
    slow = {**GRID, "seq_len": 256}  # about 10x longer tasks: the kill lands while most are unfinished
    cfg = tmp_path / "grid.toml"
    cfg.write_text(_toml(slow))
    out = tmp_path / "results.csv"
    argv = [sys.executable, "-m", "relaxspec.cli", "simulate", str(cfg), "--results", str(out),
            "--no-progress", "--scheduler", "local", "--workers", "2"]
    log = tmp_path / "client.log"
    with open(log, "wb") as err:
        proc = subprocess.Popen(argv, cwd=ROOT, stdout=err, stderr=err, start_new_session=True)
    try:
        deadline = time.monotonic() + WAIT_S
        while (not out.exists() or out.read_bytes().count(b"\n") < 1 + 3) and proc.poll() is None:
            assert time.monotonic() < deadline, "the sweep wrote no 3 rows in time"
            time.sleep(0.02)
        assert proc.poll() is None, f"the sweep ended before it was killed: {log.read_text()[-2000:]}"
        proc.kill()  # the client only; its local cluster's workers exit with it
        proc.wait(timeout=60)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # any worker left behind
        except ProcessLookupError:
            pass
    partial = out.read_bytes()
    finished = partial.count(b"\n") - 1
    print(f"killed after {finished} of {N_CONFIGS} rows")
    assert 3 <= finished < N_CONFIGS, "the sweep was not interrupted mid-way"
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=WAIT_S)
    assert done.returncode == 0, done.stderr
    grid = SweepConfig.from_dict(slow)
    assert len(read_results(out)) == N_CONFIGS  # every configuration exactly once:
    assert read_done(out) == {config_key(j.row_config(grid)) for j in jobs(grid)}
    whole = partial[:partial.rfind(b"\n") + 1]
    assert out.read_bytes().startswith(whole)  # finished rows were kept as written
    assert list(load(out).columns)[:len(COLUMNS)] == COLUMNS


# ------------------------------------------------------------------ rescoring and image generation
def test_rescore_many_traces_on_a_cluster_prints_what_the_serial_run_prints(tmp_path, capsys) -> None:
    from test_reference_cli import write_trace

    traces = []
    for i in range(3):
        write_trace(tmp_path / f"t{i}", steps=3 + i)
        traces.append(str(tmp_path / f"t{i}"))
    argv = ["rescore", *traces, "--verification", "r1"]
    assert main([*argv, "--scheduler", "none"]) == 0
    serial = sorted(capsys.readouterr().out.splitlines())
    assert main([*argv, "--workers", "2"]) == 0
    assert sorted(capsys.readouterr().out.splitlines()) == serial
    assert len(serial) == 3
    assert all(line.startswith(f"{t}: verification r1:") for line, t in zip(serial, traces, strict=True))
    assert main(["rescore", traces[0], "--verification", "r1"]) == 0  # one trace: as before, no prefix
    assert capsys.readouterr().out.startswith("verification r1: ")


def test_mini_images_on_a_cluster_are_the_serial_images(tmp_path, monkeypatch) -> None:
    import relaxspec.mini.quality as quality
    from relaxspec.mini.shipped import load_mini

    mini = load_mini(drafters=False)
    config = quality.QUALITY_CONFIGS[0]  # AR
    serial = quality.generate_config(mini, config, 3, tmp_path / "serial", progress=False)
    monkeypatch.setattr(quality, "IMAGES_PER_TASK", 2)  # 5 images: tasks of 2, 2 and 1
    (tmp_path / "dask" / quality.slug(config.name)).mkdir(parents=True)
    path = tmp_path / "dask" / quality.slug(config.name) / "images.jsonl"
    path.write_text(json.dumps(serial[0]) + "\n" + '{"index": 1, "lab')  # an interrupted run's file
    with Executor("local", workers=2) as ex:
        quality.generate_all(mini, tmp_path / "dask", 5, [config], progress=False, executor=ex)
    records = quality.read_records(path)
    assert sorted(r["index"] for r in records) == [0, 1, 2, 3, 4]  # the torn record redone, none twice

    def same(r: dict) -> dict:
        return {k: v for k, v in r.items() if k != "seconds"}

    got = sorted(records, key=lambda r: r["index"])
    assert [same(r) for r in got[:3]] == [same(r) for r in serial]


# ------------------------------------------------------------------ Ctrl-C: one line, no Dask noise
def test_dask_cancellation_noise_is_filtered() -> None:
    """The log lines Dask writes when tasks are cancelled on purpose (a worker's "... ended with
    CancelledError", the nanny's "still alive ..., killing" while closing) are dropped; others pass."""
    import logging

    from relaxspec.core.execution import QuietCancellation

    def record(name: str, level: int, msg: str) -> logging.LogRecord:
        return logging.LogRecord(name, level, __file__, 1, msg, None, None)

    quiet = QuietCancellation()
    assert not quiet.filter(record("distributed.worker.state_machine", logging.WARNING,
                                   "Async instruction for <Task cancelled name=\"execute('x')\"> ended with "
                                   "CancelledError"))
    assert not quiet.filter(record("distributed.nanny", logging.WARNING,
                                   "Worker process still alive after 4.0 seconds, killing"))
    assert quiet.filter(record("distributed.worker", logging.WARNING, "Worker is at 85% memory usage"))
    assert quiet.filter(record("distributed.worker.state_machine", logging.ERROR,
                               "ended with CancelledError"))


INTERRUPTED = """
import sys, time
from relaxspec.core.execution import Executor

def task(seconds):
    time.sleep(seconds)
    return seconds

try:
    with Executor("local", workers=2) as ex:
        for i, r in ex.run(task, [(0.0,), (30.0,)]):
            raise KeyboardInterrupt  # Ctrl-C while the second task runs
except KeyboardInterrupt:
    print("relaxspec: interrupted", file=sys.stderr)
"""


def test_an_interrupted_local_run_prints_no_dask_cancellation_noise() -> None:
    """Leaving a local cluster's run by Ctrl-C cancels the running task and closes the cluster: stderr holds
    our one line only, not Dask's CancelledError and nanny warnings (issue 26 item 17)."""
    done = subprocess.run([sys.executable, "-c", INTERRUPTED], cwd=ROOT, capture_output=True, text=True,
                          timeout=WAIT_S, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip().splitlines() == ["relaxspec: interrupted"], done.stderr
