"""The servers the live tests share: each configuration (server kind, GGUF, arguments) is started once per test
session, on the first test that asks for it, and every test file that asks for the same one gets the same process
(tests/conftest.py `live_server`). Starting llama-cpp-python's server costs 5-15 s on a loaded 2-core box and
llama-server a few seconds plus its first prompt; the live files ask for the same SmolLM2 servers again and again.

Every server is stopped at the end of the session by the fixture's finalizer (a failing or interrupted test
included: pytest tears session fixtures down on Ctrl-C, and tests/conftest.py turns SIGTERM into an interrupt),
its whole process group killed (tests/endpoint_assets.py ServerProcess.stop); the session then fails if any
server is still running (tests/conftest.py pytest_sessionfinish; under xdist the controller fails the run from what
each worker reports, pytest_testnodedown)."""
from __future__ import annotations

from tests.assets import or_fail


class ServerPool:
    def __init__(self):
        self.servers: dict[tuple, object] = {}

    def get(self, cls, gguf, *args: str, **options):
        """The running `cls(gguf, *args, **options)`, started now if it is not (or died); a server that does not
        start fails the test in one line (assets.or_fail)."""
        key = (cls.__name__, str(gguf), args, tuple(sorted(options.items())))
        server = self.servers.get(key)
        if server is None or not server.alive():
            server = or_fail(cls(gguf, *args, **options).start)
            self.servers[key] = server
        return server

    def stop_all(self) -> None:
        for server in self.servers.values():
            server.stop()
        self.servers.clear()
