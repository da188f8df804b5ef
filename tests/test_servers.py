"""Servers the tests start never outlive them (tests/endpoint_assets.py ServerProcess, tests/server_pool.py, the
hooks in tests/conftest.py): stop() kills the server's whole process group (a child it started goes too), the
session pool starts each configuration once and stops it, and a pytest run whose test fails, or which is sent
SIGTERM mid-test, leaves no server process behind, and one that leaves a server running fails, in one process and
under xdist's `-n 2` as the suite runs (the controller prints the line and sets the exit status); a server launched
once per session in the background (vLLM's way, tests/session_servers.py) is shared by both workers and stopped by
the controller. A stand-in server (a Python HTTP server that starts a child of its own) plays llama-server, so this
runs on any machine: six inner pytest runs, 55 s at a load of ~5 on the 2-core box plus 26 s for the session
server's (each `-n 2` run 16-26 s: two workers start)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests import session_servers
from tests.endpoint_assets import RUNNING, ServerProcess, leftovers
from tests.server_pool import ServerPool

ROOT = Path(__file__).resolve().parents[1]
SERVER = """
import http.server, subprocess, sys
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
open(sys.argv[2], "w").write(str(child.pid))
class Ok(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers()
    def log_message(self, *a):
        pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Ok).serve_forever()
"""


class StandIn(ServerProcess):
    """A server that starts a child process of its own, as llama_cpp.server's workers would."""
    name = "stand-in"

    def start(self) -> "StandIn":
        self.child_file = self.log.with_suffix(".child")
        self.launch([sys.executable, "-c", SERVER, str(self.port), str(self.child_file)], dict(os.environ))
        self.wait_ready("/health", (200,), 60, 0.1)
        return self

    def child_pid(self) -> int:
        return int(self.child_file.read_text())


def running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


def gone(*pids: int, within_s: float = 10) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if not any(running(p) for p in pids):
            return True
        time.sleep(0.1)
    return False


def new_leftovers(before: list[str]) -> list[str]:
    """Servers launched since `before` and still running: a session's shared servers (the pool) may be up while
    these tests run, and are not theirs to judge."""
    return [line for line in leftovers() if line not in before]


def test_stop_kills_the_server_and_what_it_started():
    before = leftovers()
    server = StandIn(Path("unused.gguf")).start()
    pids = (server.proc.pid, server.child_pid())
    assert all(running(p) for p in pids) and server in RUNNING
    server.stop()
    assert gone(*pids) and server not in RUNNING and new_leftovers(before) == []


def test_entering_a_started_server_does_not_start_a_second_one():
    """`with or_fail(Server(...).start) as s` (test_chain_live.py): entering a started server keeps its process;
    it once launched a second on the same port, and the first, never stopped, outlived the suite."""
    before = leftovers()
    server = StandIn(Path("unused.gguf")).start()
    first = server.proc.pid
    with server as entered:
        assert entered is server and server.proc.pid == first
    assert gone(first, server.child_pid()) and new_leftovers(before) == []
    try:
        server.start()
        server.launch([sys.executable, "-c", "pass"], dict(os.environ))
        raise AssertionError("a second launch of a running server must be refused")
    except RuntimeError as e:
        assert "already running" in str(e)
    finally:
        server.stop()


LOST = """
import sys
from pathlib import Path
from tests.endpoint_assets import leftovers, stop_all
from tests.test_servers import StandIn
server = StandIn(Path("unused.gguf")).start()
lost = server.proc
server.proc = None                    # what the double start did: the object no longer holds its process
listed = any(f"pid {lost.pid} " in line for line in leftovers())
stop_all()
print(lost.pid, server.child_pid(), listed, leftovers() == [])
"""


def test_a_process_whose_object_lost_it_is_still_found_and_stopped():
    """Whatever became of a server object (its process replaced, the object dropped), every process launched is
    listed by leftovers() and stopped by stop_all(). In a process of its own: stop_all() here would also stop the
    session's shared servers."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", LOST], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    lost, child, listed, none_left = done.stdout.split()
    assert listed == "True" and none_left == "True" and gone(int(lost), int(child))


def test_the_pool_starts_each_configuration_once_and_stops_them_all():
    before = leftovers()
    pool = ServerPool()
    a = pool.get(StandIn, Path("a.gguf"))
    assert pool.get(StandIn, Path("a.gguf")) is a and pool.get(StandIn, Path("b.gguf")) is not a
    pids = [s.proc.pid for s in pool.servers.values()] + [s.child_pid() for s in pool.servers.values()]
    pool.stop_all()
    assert gone(*pids) and new_leftovers(before) == []


INNER = """
import time
from pathlib import Path
from tests.test_servers import StandIn

def test_uses_a_shared_server(live_server, tmp_path_factory):
    server = live_server(StandIn, Path("x.gguf"))
    Path({out!r} + ".part").write_text(f"{{server.proc.pid}} {{server.child_pid()}}")
    Path({out!r} + ".part").rename({out!r})      # whole, or not there: the outer test reads it as it appears
    {body}
"""


def inner_run(tmp_path, body: str, interrupt: bool = False,
              workers: int = 0) -> tuple[subprocess.CompletedProcess | None, list[int]]:
    """An inner pytest run of INNER with `body`, in one process or under xdist with `workers` (the suite's own
    `-n 2` does not reach it: its rootdir has no pyproject.toml)."""
    out = tmp_path / "pids"
    test = tmp_path / "test_inner.py"
    test.write_text(textwrap.dedent(INNER.format(out=str(out), body=body)))
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.conftest",
           "--rootdir", str(tmp_path), "-n", str(workers), str(test)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if interrupt:      # when the server is up: an inner pytest's imports alone took over 120 s on a loaded box
        deadline = time.monotonic() + 600
        while not out.exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
    stdout, _ = proc.communicate(timeout=900)
    pids = [int(p) for p in out.read_text().split()] if out.exists() else []
    return subprocess.CompletedProcess(cmd, proc.returncode, stdout), pids


def test_a_failing_test_leaves_no_server(tmp_path):
    done, pids = inner_run(tmp_path, "assert False, 'the test fails'")
    assert done.returncode == 1 and "the test fails" in done.stdout, done.stdout[-2000:]
    assert len(pids) == 2 and gone(*pids), done.stdout[-2000:]


def test_an_interrupted_run_leaves_no_server(tmp_path):
    done, pids = inner_run(tmp_path, "time.sleep(120)", interrupt=True)
    assert done.returncode != 0 and len(pids) == 2, done.stdout[-2000:]
    assert gone(*pids), done.stdout[-2000:]


LEFT = "servers left running by the tests (now killed)"


@pytest.mark.parametrize("workers", [0, 2])
def test_a_server_left_running_fails_the_session(tmp_path, workers):
    """A test that starts a server outside the pool and forgets it: the session fails, naming and killing it, in
    one process and under xdist (`-n 2`, as the suite runs: the worker that ran the test kills the server and its
    controller prints the line and fails the run)."""
    done, pids = inner_run(tmp_path, "StandIn(Path('forgotten.gguf')).start()", workers=workers)
    assert done.returncode == 1 and LEFT in done.stdout and "forgotten.gguf" in done.stdout, done.stdout
    assert "1 passed" in done.stdout and gone(*pids), done.stdout


def test_a_run_under_two_workers_that_stops_its_servers_passes(tmp_path):
    """The healthy twin under `-n 2`: the pool's server is stopped at the worker's session end, nothing is
    reported and the run exits 0."""
    done, pids = inner_run(tmp_path, "assert server.alive()", workers=2)
    assert done.returncode == 0 and LEFT not in done.stdout and "1 passed" in done.stdout, done.stdout
    assert len(pids) == 2 and gone(*pids), done.stdout


SESSION_SERVER_TEST = """
import sys
from pathlib import Path

import pytest

from tests import session_servers
from tests.test_servers import SERVER

CHILD = {out!r} + ".child"
session_servers.register("standin_session", lambda port: session_servers.Launch(
    [sys.executable, "-c", SERVER, str(port), CHILD], {{}}, "/"))


@pytest.fixture(scope="session")
def standin_session():
    return session_servers.wait_for("standin_session", 120)


def test_uses_it(standin_session):
    Path({out!r} + ".{name}").write_text(f"{{standin_session.pid}} {{Path(CHILD).read_text()}}")
"""


def test_a_session_server_is_launched_once_and_stopped_at_the_end(tmp_path):
    """tests/session_servers.py (vLLM's way in): two test files ask for the same background server; under `-n 2`
    each worker collects both, the first to collect launches and the other finds it; both files see the same
    process, and the session's owner (the controller) stops it, and what it started, at the end. 26 s on the
    loaded 2-core box (an inner pytest starting two workers); one process takes the same path without a worker."""
    workers = 2
    out = tmp_path / "seen"
    for name in ("a", "b"):
        (tmp_path / f"test_inner_{name}.py").write_text(SESSION_SERVER_TEST.format(out=str(out), name=name))
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.conftest",
           "--rootdir", str(tmp_path), "-n", str(workers), str(tmp_path)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    env.pop(session_servers.STATE_ENV, None)
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and "2 passed" in done.stdout and LEFT not in done.stdout, done.stdout[-2000:]
    seen = {(tmp_path / f"seen.{name}").read_text() for name in ("a", "b")}
    assert len(seen) == 1, seen
    pids = [int(p) for p in seen.pop().split()]
    assert gone(*pids)
