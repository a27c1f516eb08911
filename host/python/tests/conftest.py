"""Fixtures for the package's tests: the real `toolgate` binary (the
driver, tests/embed_python.rs, names it in TOOLGATE_BIN), a config over the
real bundled policies (tests/embed/policies.toml, in TOOLGATE_TEST_POLICIES),
a store per test, and the
store's daemon when a test needs a person to answer."""

from __future__ import annotations

import hashlib
import os
import subprocess
import time
from pathlib import Path

import pytest

import toolgate

TOKEN = "python-tests-channel-token"

def _named(variable: str) -> Path:
    """The file the driver names in `variable`."""
    path = os.environ.get(variable)
    if not path or not Path(path).exists():
        pytest.fail(f"{variable} must name a file (tests/embed_python.rs sets it): run "
                    "these tests with `cargo test --test suite embed_python::`")
    return Path(path)


@pytest.fixture(scope="session")
def toolgate_bin() -> str:
    return str(_named("TOOLGATE_BIN"))


@pytest.fixture(scope="session")
def policies() -> str:
    """The operator's rules over the bundled policies (tests/embed/policies.toml)."""
    return _named("TOOLGATE_TEST_POLICIES").read_text()


@pytest.fixture
def setup(tmp_path: Path, toolgate_bin: str, policies: str) -> "Setup":
    return Setup(tmp_path, toolgate_bin, policies)


class Setup:
    """A config (`policies`, plus a socket of its own and a channel
    adapter's token for the tests' person), a store, and the commands a
    person would run."""

    def __init__(self, dir: Path, binary: str, policies: str) -> None:
        self.dir = dir
        self.binary = binary
        self.store = dir / "toolgate.redb"
        self.config = dir / "toolgate.toml"
        digest = hashlib.sha256(TOKEN.encode()).hexdigest()
        # A socket of its own, so that waiting for the daemon never opens
        # the store in this process instead (it would hold it from the daemon).
        self.socket = dir / "toolgate.sock"
        self.config.write_text(
            policies + f"\n[daemon]\nsocket = \"{self.socket}\"\n\n[approvals.tokens]\nci = \"{digest}\"\n"
        )
        self.token = dir / "ci.token"
        self.token.write_text(TOKEN + "\n")
        self.daemon = None

    def toolgate(self, **kwargs) -> toolgate.Toolgate:
        return toolgate.Toolgate(str(self.config), store=str(self.store), **kwargs)

    def command(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [self.binary, "--config", str(self.config), "--store", str(self.store), *args],
            capture_output=True, text=True, timeout=120,
        )

    def serve(self) -> None:
        """Start the store's daemon and wait until a host reaches it."""
        self.daemon = subprocess.Popen(
            [self.binary, "--config", str(self.config), "--store", str(self.store), "serve"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if self.toolgate(socket=str(self.socket)).through_daemon:
                    return
            except toolgate.ToolgateError:
                pass
            time.sleep(0.1)
        pytest.fail("the toolgate daemon did not answer within 60 s")

    def person_answers(self, request_id: str, decision: str = "approve") -> None:
        """A person answers a pause through a channel adapter with its token."""
        done = self.command("gates", "resolve", "--request-id", request_id, "--decision",
                            decision, "--channel", "ci", "--token-file", str(self.token))
        assert done.returncode == 0, done.stderr

    def stop(self) -> None:
        if self.daemon is not None:
            self.daemon.terminate()
            self.daemon.wait(timeout=30)
            self.daemon = None


@pytest.fixture
def served(setup: Setup):
    # Stopped however the test ends, even when the daemon never answered.
    try:
        setup.serve()
        yield setup
    finally:
        setup.stop()
