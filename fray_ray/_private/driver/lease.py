"""The session's lease: where the jobs a session starts sit in Iris's job tree, so they end with it.

How the work of a session ends when its driver does (fate sharing), by where the driver runs:

- `FateMode.IN_PROCESS` (local mode): executors and actors are threads of the driver.
- `FateMode.OWNED_CLUSTER`: the driver started an embedded cluster; the cluster's reaper kills
  every task process when the driver dies (SECURITY.md, "Processes").
- `FateMode.DRIVER_JOB`: the driver runs inside an Iris task (`fray-ray submit`); the session's
  jobs are children of the driver's own job, and Iris cancels them when that job ends other
  than by succeeding, or is terminated.
- `FateMode.LEASE`: any other cluster. The driver first launches a lease job: a small script
  of standard library Python (run by Iris's callable runner as `exec`, so a worker image
  without fray_ray cannot break it) that connects back to the session service, authenticated
  with the session token, and exits 1 as soon as that connection is lost. Everything else the
  session starts is its child, so when the driver dies (SIGKILL included) the lease job fails
  and Iris cancels the children recursively. A clean `shutdown()` first lets the session's
  executors and actors end by themselves (they exit 0: their jobs succeed), then tells the
  holder it is released (one frame on its connection), so the lease job succeeds too; only a
  lease job that does not end within `RELEASE_WAIT_S` is terminated.

On an owned cluster the lease job is launched too when the session asks for a job of its own
(`session_job`, from `init(include_dashboard=True)`: its dashboard feed registers under it);
there it holds nothing, the session's other jobs stay root jobs, and it is released the same way.

Detached actors are root jobs in every mode: they outlive the driver until `ray.kill` or the
cluster stops. Independently of all this, an executor or actor host exits at once (status 1,
ending a running task) when its own session connection drops (`worker.py`, `actor_host.py`), so
work stops within a second even where no cascade reaches it.

The lease job is launched first on the launcher's thread, so the children launched after it
find their parent; nothing waits for it to run or connect, so it costs the first task one
`LaunchJob` call. If the controller refuses it, the session's jobs become root jobs (with a
warning) and only the connection rule above ends them.
"""

from __future__ import annotations

import enum
import logging
import threading
from typing import TYPE_CHECKING, Any

from fray_ray.fray import Entrypoint, JobRequest, ResourceConfig

if TYPE_CHECKING:
    from fray_ray._private.stream.protocol import Connection
    from fray_ray.fray import Client

logger = logging.getLogger(__name__)

#: Seconds a lease holder keeps trying to reach a driver whose port refuses connections (the
#: driver is gone), and one that does not answer at all (the network may still be coming up).
REFUSED_WINDOW_S = 10.0
UNREACHABLE_WINDOW_S = 60.0
#: Seconds a clean shutdown waits for the released lease job to end before terminating it.
RELEASE_WAIT_S = 10.0


class FateMode(enum.Enum):
    IN_PROCESS = "in process"  # local mode: nothing runs outside the driver
    OWNED_CLUSTER = "owned cluster"  # the embedded cluster's reaper ends everything with the driver
    DRIVER_JOB = "driver job"  # children of the driver's own Iris job
    LEASE = "lease"  # children of a lease job that ends when the driver's connection does


def fate_mode(client: Client, *, in_process: bool, owns_cluster: bool) -> FateMode:
    """The fate-sharing arrangement for a session on `client`."""
    if in_process:
        return FateMode.IN_PROCESS
    if owns_cluster:
        return FateMode.OWNED_CLUSTER
    if client.parent_job:
        return FateMode.DRIVER_JOB
    return FateMode.LEASE


class LeaseState(enum.Enum):
    NOT_LAUNCHED = "not launched"  # no lease job (yet, or in this mode)
    LAUNCHING = "launching"  # asked for: its holder may connect before the controller has answered
    LAUNCHED = "launched"  # the lease job exists; the session's jobs are its children
    REFUSED = "refused"  # the controller would not take it: the session's jobs are root jobs
    RELEASED = "released"  # terminated at shutdown


class SessionLease:
    """Where one session's jobs go, and the lease job that holds them in `FateMode.LEASE`.

    `launch()` and `release()` block on the controller: the launcher runs them on its thread.
    """

    def __init__(
        self, client: Client, mode: FateMode, *, session_name: str, session_address: str, token: str,
        session_job: bool = False,
    ) -> None:
        """`session_job`: on an owned cluster too, launch the lease job (as the session's own
        job, for its dashboard feed); the session's other jobs stay root jobs there."""
        self.mode = mode
        self._launches = mode is FateMode.LEASE or (session_job and mode is FateMode.OWNED_CLUSTER)
        self._client = client
        self._session_name = session_name
        self._session_address = session_address
        self._token = token
        self._lock = threading.Lock()  # guards the fields below
        self._state = LeaseState.NOT_LAUNCHED
        self._job: Any = None  # the lease job's Fray handle while it is to be released
        self._job_id: str | None = None  # kept after release: late launches under it are refused
        self._holder: Connection | None = None  # the lease holder's connection, once it said hello

    # ---- placement -----------------------------------------------------------------------

    @property
    def job_id(self) -> str | None:
        """The lease job's id once launched, else None."""
        with self._lock:
            return self._job_id

    def children(self) -> dict[str, Any]:
        """Launch arguments that make a job one of the session's (it ends with the session)."""
        if self.mode is FateMode.LEASE:
            with self._lock:
                return {"parent_job": self._job_id}  # None (a root job) if the lease was refused
        return {}  # the client's own placement: the driver's job, or root jobs of an owned cluster

    def detached(self) -> dict[str, Any]:
        """Launch (and lookup) arguments for a job that outlives the session: a root job."""
        if self.mode is FateMode.IN_PROCESS:
            return {}
        return {"parent_job": None}

    @property
    def covers_children(self) -> bool:
        """True when ending the lease job ends every job of the session (one terminate)."""
        with self._lock:
            return self._state is LeaseState.LAUNCHED and self.mode is FateMode.LEASE

    # ---- the lease job -------------------------------------------------------------------

    def launch(self) -> None:
        """Launch the lease job (in `FateMode.LEASE`); returns once the controller accepted it.
        If it refuses, warn and leave the session's jobs at the root."""
        if not self._launches:
            return
        with self._lock:
            if self._state is LeaseState.NOT_LAUNCHED:  # not released meanwhile
                self._state = LeaseState.LAUNCHING
        try:
            job = self._client.submit(self._request(), adopt_existing=False, parent_job=None)
        except Exception as exc:  # noqa: BLE001 - the session still works, with less protection
            logger.warning(
                "the controller did not accept this session's lease job (%s); its executors and actors run as "
                "root jobs and end with this driver only when their connection to it drops", exc,
            )
            with self._lock:
                self._state = LeaseState.REFUSED
                holder, self._holder = self._holder, None
            if holder is not None:  # the job started after all: with nothing to hold, it ends
                holder.close()
            return
        with self._lock:
            released = self._state is LeaseState.RELEASED
            self._job_id = job.job_id
            if not released:
                self._job = job
                self._state = LeaseState.LAUNCHED
        if released:  # shut down while the launch was in flight
            self._terminate(job)

    def _request(self) -> Any:
        # `exec` pickles as the builtin it is: the task needs the runner's cloudpickle, nothing
        # of fray_ray. The token travels inside the pickle, as an executor's does.
        scope = {"__name__": "__fray_ray_lease__", "LEASE": (self._session_address, self._session_name, self._token)}
        return JobRequest(
            name=self._session_name,
            entrypoint=Entrypoint.from_callable(exec, args=(LEASE_HOLDER_SOURCE, scope)),
            resources=ResourceConfig(cpu=0, ram="0", disk="0"),
            max_retries_failure=0,
            # A lost host is no lost driver: the holder starts again elsewhere and reconnects.
            max_retries_preemption=100,
        )

    def holder_connected(self, connection: Connection) -> bool:
        """The lease holder introduced itself (authenticated by the session service): keep its
        connection open (the session service owns it) unless this session holds no lease."""
        with self._lock:
            # Only a session that launched one has a holder; on a fast cluster it may say hello
            # before the controller's answer to the launch is back.
            accepted = self._state in (LeaseState.LAUNCHING, LeaseState.LAUNCHED)
            if accepted:
                self._holder = connection
            return accepted

    def failure(self) -> str | None:
        """If the lease job has ended while the session runs (its holder could not reach the
        driver, or lost it), why, for the errors of the jobs Iris cancelled with it; else None.
        Blocks for a controller query or two."""
        with self._lock:
            job = self._job if self._state is LeaseState.LAUNCHED and self.mode is FateMode.LEASE else None
        if job is None:
            return None
        try:
            status = job.status()
            if not status.finished():
                return None
            tail = "\n".join(job.logs(max_lines=5))
        except Exception:  # noqa: BLE001 - a courtesy: the caller's failure stands without it
            return None
        return f"\nthe session's lease job {job.job_id} ended {status} before it:\n{tail}"

    def release(self) -> None:
        """Clean shutdown: tell the holder it is released, so the lease job ends as succeeded;
        terminate it (and with it every child still running) if it does not end in time, or
        if its holder never connected. Blocks until the controller reports it ended."""
        with self._lock:
            job, self._job = self._job, None
            holder, self._holder = self._holder, None
            self._state = LeaseState.RELEASED
        if job is None:
            return
        if holder is not None:
            try:
                holder.notify("released")
                job.wait(timeout=RELEASE_WAIT_S, raise_on_failure=False)
                return
            except Exception:  # noqa: BLE001 - gone, slow or unreachable: terminate as before
                logger.debug("the lease job %s did not end on release", job.job_id, exc_info=True)
        self._terminate(job)

    @staticmethod
    def _terminate(job: Any) -> None:
        try:
            job.terminate()
        except Exception:  # noqa: BLE001 - best effort: the controller may be gone
            logger.debug("terminating the lease job %s failed", getattr(job, "job_id", job), exc_info=True)


#: The lease holder, run as `exec(LEASE_HOLDER_SOURCE, {"LEASE": (session address, session
#: name, token)})`. Standard library only. It sends the session service its greeting (one
#: msgpack frame, encoded by hand: see `protocol.py`), checks the answer, then reads until the
#: connection ends and exits 1.
LEASE_HOLDER_SOURCE = f'''
"""fray_ray lease holder: lives as long as its driver's session connection, then fails."""
import os, socket, struct, sys, time


def pack(value):
    if isinstance(value, int):
        return bytes([value]) if 0 <= value < 128 else b"\\xcf" + struct.pack(">Q", value)
    if isinstance(value, str):
        data = value.encode()
        if len(data) < 32:
            return bytes([0xA0 | len(data)]) + data
        return (b"\\xd9" + bytes([len(data)]) if len(data) < 256 else b"\\xda" + struct.pack(">H", len(data))) + data
    if isinstance(value, list):
        return bytes([0x90 | len(value)]) + b"".join(pack(item) for item in value)
    return bytes([0x80 | len(value)]) + b"".join(pack(k) + pack(v) for k, v in value.items())


def read_exactly(sock, size):
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return data


def fail(message):
    print("fray_ray lease holder:", message, file=sys.stderr, flush=True)
    sys.exit(1)


def main():
    address, session, token = LEASE
    host, _, port = address.rpartition(":")
    start = time.monotonic()
    while True:
        try:
            sock = socket.create_connection((host.strip("[]"), int(port)), timeout=10)
            break
        except ConnectionRefusedError as exc:
            if time.monotonic() - start > {REFUSED_WINDOW_S}:
                fail("the session service of %s at %s refuses connections (%s): its driver is gone, or that "
                     "address does not reach it from this host" % (session, address, exc))
        except OSError as exc:
            if time.monotonic() - start > {UNREACHABLE_WINDOW_S}:
                fail("cannot reach the session service of %s at %s: %s" % (session, address, exc))
        time.sleep(0.2)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for option, value in (("TCP_KEEPIDLE", 10), ("TCP_KEEPINTVL", 5), ("TCP_KEEPCNT", 3)):
        if hasattr(socket, option):
            sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, option), value)
    hello = pack([0, 1, "hello", {{"kind": "lease", "id": session, "token": token, "pid": os.getpid()}}])
    try:
        sock.sendall(struct.pack("<II", len(hello), 0) + hello)
        header_size, _ = struct.unpack("<II", read_exactly(sock, 8))
        answer = read_exactly(sock, header_size)
    except OSError as exc:
        fail("the session service of %s at %s did not answer: %s" % (session, address, exc))
    if answer[:2] != b"\\x94\\x01":
        fail("the session service of %s at %s refused this lease holder" % (session, address))
    print("holding the lease of %s at %s" % (session, address), flush=True)
    sock.settimeout(None)
    released = False
    try:
        while not released:  # whole frames; only the `released` notification ends the wait
            header_size, buffers = struct.unpack("<II", read_exactly(sock, 8))
            header = read_exactly(sock, header_size)
            for _ in range(buffers):
                read_exactly(sock, struct.unpack("<Q", read_exactly(sock, 8))[0])
            released = b"\\xa8released" in header
    except (OSError, ConnectionError, struct.error):
        released = False
    if released:
        print("released by the driver of %s: the session ended" % session, flush=True)
        sys.exit(0)
    fail("lost the connection to the driver of %s at %s: ending the session's jobs" % (session, address))


main()
'''
