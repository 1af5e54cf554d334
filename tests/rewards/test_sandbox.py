"""Sandbox tests (SPEC §6): every limit is exercised by a program that would escape it."""

from __future__ import annotations

import glob
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from hista.rewards import sandbox
from hista.rewards.sandbox import run_sandboxed, sandbox_backend

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the sandbox targets Linux")

needs_bwrap = pytest.mark.skipif(
    sandbox_backend() != "bwrap", reason="isolation checks need the bubblewrap backend"
)


def _alive(marker: str) -> list[int]:
    """PIDs of processes whose command line contains ``marker``."""
    found = []
    for path in glob.glob("/proc/[0-9]*/cmdline"):
        try:
            with open(path, "rb") as fh:
                if marker.encode() in fh.read():
                    found.append(int(path.split("/")[2]))
        except OSError:
            pass
    return [p for p in found if p != os.getpid()]


def _wait_gone(marker: str, within: float = 3.0) -> list[int]:
    end = time.monotonic() + within
    while True:
        left = _alive(marker)
        if not left or time.monotonic() > end:
            return left
        time.sleep(0.05)


# --------------------------------------------------------------------------- basics


def test_backend_is_bwrap_when_installed():
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed")
    assert sandbox_backend() == "bwrap"


def test_stdin_stdout_exit_code():
    r = run_sandboxed("import sys\nprint(input()[::-1])\nprint('err', file=sys.stderr)", "abc\n")
    assert r.ok and r.returncode == 0
    assert r.stdout == "cba\n" and r.stderr == "err\n"
    assert not r.timed_out and not r.truncated
    r = run_sandboxed("import sys; sys.exit(3)")
    assert r.returncode == 3 and not r.ok
    r = run_sandboxed("print('答案 🎉')")
    assert r.stdout == "答案 🎉\n"
    r = run_sandboxed("def f(:\n")
    assert not r.ok and "SyntaxError" in r.stderr


def test_large_stdin_no_deadlock():
    data = "x" * 2_000_000
    r = run_sandboxed("import sys\nprint(len(sys.stdin.read()))", data, max_output_bytes=100)
    assert r.ok and r.stdout.strip() == str(len(data))
    r = run_sandboxed("print('ignores stdin')", data)  # never reads it
    assert r.ok


def test_workdir_is_fresh_and_removed():
    r = run_sandboxed("import os\nopen('f.txt','w').write('hi')\nprint(os.getcwd())\nprint(sorted(os.listdir('.')))")
    assert r.ok, r.stderr
    cwd, listing = r.stdout.splitlines()
    assert listing == "['f.txt', 'main.py']"
    assert not os.path.exists(cwd)


def test_parallel_runs_from_threads():
    with ThreadPoolExecutor(8) as ex:
        results = list(ex.map(lambda i: run_sandboxed(f"print({i} * 2)"), range(16)))
    assert [r.stdout.strip() for r in results] == [str(i * 2) for i in range(16)]


def test_bad_arguments_raise():
    with pytest.raises(TypeError):
        run_sandboxed(b"print(1)")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        run_sandboxed("print(1)", timeout_s=0)


# --------------------------------------------------------------------------- time


def test_infinite_loop_killed_at_wall_limit():
    t = time.monotonic()
    r = run_sandboxed("while True:\n    pass\n", timeout_s=1.0, cpu_s=30)  # only the wall clock
    elapsed = time.monotonic() - t
    assert r.timed_out and not r.ok
    assert 0.9 <= elapsed < 1.0 + 1.5


def test_sleeping_program_killed_at_wall_limit():
    t = time.monotonic()
    r = run_sandboxed("import time\ntime.sleep(20)", timeout_s=0.5)
    assert r.timed_out and time.monotonic() - t < 2.0


def test_cpu_limit():
    t = time.monotonic()
    r = run_sandboxed("while True:\n    pass\n", timeout_s=20.0, cpu_s=1)
    assert not r.ok and not r.timed_out  # killed by RLIMIT_CPU, not by the wall clock
    assert time.monotonic() - t < 5.0


# --------------------------------------------------------------------------- memory


def test_memory_hog_is_stopped_and_caller_survives():
    hog = "chunks = []\nwhile True:\n    chunks.append(bytearray(16 * 1024 * 1024))\n"
    t = time.monotonic()
    r = run_sandboxed(hog, timeout_s=10.0, memory_mb=256)
    assert not r.ok and not r.timed_out
    assert "MemoryError" in r.stderr or r.returncode != 0
    assert time.monotonic() - t < 5.0
    # the limit is what stopped it: the same allocation fits under a larger limit
    big = "x = bytearray(300 * 1024 * 1024)\nprint(len(x) // 2**20)"
    assert not run_sandboxed(big, memory_mb=128).ok
    assert run_sandboxed(big, memory_mb=1024).stdout.strip() == "300"
    # and this process is fine
    assert len(bytearray(10 * 1024 * 1024)) == 10 * 1024 * 1024


# --------------------------------------------------------------------------- processes

_FORK_COUNT = """
import os, time
n = 0
try:
    while n < 200:
        pid = os.fork()
        if pid == 0:
            time.sleep(3)
            os._exit(0)
        n += 1
except OSError:
    pass
print(n)
"""


def test_process_limit_is_enforced():
    r = run_sandboxed(_FORK_COUNT, timeout_s=10.0, max_processes=16)
    assert r.ok, r.stderr
    assert int(r.stdout) < 16  # without RLIMIT_NPROC in effect this prints 200


def test_fork_storm_is_contained():
    probe = run_sandboxed(_FORK_COUNT, timeout_s=10.0, max_processes=16)
    if not probe.ok or int(probe.stdout) >= 16:
        pytest.skip("process limit not enforced (see test_process_limit_is_enforced)")
    marker = f"hista-forkstorm-{uuid.uuid4().hex}"
    storm = (
        "import os, sys, time\n"
        f"if {marker!r} not in sys.argv:\n"
        f"    os.execv(sys.executable, [sys.executable, sys.argv[0], {marker!r}])\n"
        "for _ in range(12):\n"  # bounded even if the limit failed: at most 4096 processes
        "    try:\n"
        "        os.fork()\n"
        "    except OSError:\n"
        "        pass\n"
        "time.sleep(1000)\n"
    )
    t = time.monotonic()
    r = run_sandboxed(storm, timeout_s=2.0, max_processes=32)
    assert not r.ok and r.timed_out
    assert time.monotonic() - t < 5.0
    assert _wait_gone(marker) == []  # the whole tree is gone
    # this process and the machine can still start processes
    assert subprocess.run([sys.executable, "-c", "print(1)"], capture_output=True).stdout == b"1\n"


def _spawner(marker: str, then: str) -> str:
    return (
        "import subprocess, sys\n"
        f"subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(1000)', {marker!r}],\n"
        "                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
        "print('spawned', flush=True)\n" + then
    )


def test_background_child_killed_on_timeout():
    marker = f"hista-bg-{uuid.uuid4().hex}"
    r = run_sandboxed(_spawner(marker, "import time\ntime.sleep(1000)\n"), timeout_s=1.0)
    assert r.timed_out and r.stdout == "spawned\n"
    assert _wait_gone(marker) == []


def test_background_child_killed_on_exit():
    marker = f"hista-bg-{uuid.uuid4().hex}"
    t = time.monotonic()
    r = run_sandboxed(_spawner(marker, ""), timeout_s=5.0)
    assert r.stdout == "spawned\n" and not r.timed_out
    assert time.monotonic() - t < 4.0
    assert _wait_gone(marker) == []


# --------------------------------------------------------------------------- output


def test_output_flood_truncated():
    t = time.monotonic()
    r = run_sandboxed("while True:\n    print('x' * 1000)\n", timeout_s=10.0, max_output_bytes=10_000)
    assert r.truncated and not r.ok and not r.timed_out
    assert len(r.stdout.encode()) == 10_000
    assert time.monotonic() - t < 5.0  # killed when it passed the limit, not at the timeout


def test_stderr_flood_truncated():
    r = run_sandboxed(
        "import sys\nwhile True:\n    sys.stderr.write('e' * 4096)\n", timeout_s=10.0, max_output_bytes=5000
    )
    assert r.truncated and len(r.stderr) == 5000


# --------------------------------------------------------------------------- isolation


@needs_bwrap
def test_network_is_unreachable():
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(0.2)
    port = server.getsockname()[1]
    accepted: list = []
    stop = threading.Event()

    def serve():
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            accepted.append(conn)
            conn.close()

    th = threading.Thread(target=serve, daemon=True)
    th.start()
    client = (
        "import socket\n"
        "try:\n"
        f"    socket.create_connection(('127.0.0.1', {port}), timeout=2)\n"
        "    print('CONNECTED')\n"
        "except OSError as exc:\n"
        "    print('FAILED', exc)\n"
    )
    try:
        # control: the same client outside the sandbox does reach the server
        ctl = subprocess.run([sys.executable, "-c", client], capture_output=True, text=True, timeout=10)
        assert ctl.stdout.startswith("CONNECTED")
        deadline = time.monotonic() + 2
        while len(accepted) < 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(accepted) == 1
        r = run_sandboxed(client, timeout_s=5.0)
        assert r.stdout.startswith("FAILED"), r.stdout + r.stderr
        time.sleep(0.2)
        assert len(accepted) == 1  # nothing new reached the server
    finally:
        stop.set()
        th.join(2)
        server.close()


@needs_bwrap
def test_writes_outside_workdir_fail(tmp_path):
    # a world-writable folder outside /tmp, visible in the sandbox: only read-only root stops it
    outside = tempfile.mkdtemp(prefix="hista-sbx-test-", dir="/var/tmp" if os.path.isdir("/var/tmp") else None)
    os.chmod(outside, 0o777)
    tmp_path.chmod(0o777)
    leak = f"/tmp/hista-leak-{uuid.uuid4().hex}"
    targets = [os.path.join(outside, "escape.txt"), str(tmp_path / "escape.txt"), leak]
    code = (
        "import sys\n"
        f"for path in {targets!r}:\n"
        "    try:\n"
        "        open(path, 'w').write('escaped')\n"
        "        print('WROTE', path)\n"
        "    except OSError as exc:\n"
        "        print('DENIED', path, type(exc).__name__)\n"
        "open('inside.txt', 'w').write('ok')\n"
        "print('INSIDE OK')\n"
    )
    try:
        r = run_sandboxed(code)
        assert r.ok, r.stderr
        assert "INSIDE OK" in r.stdout
        assert not os.path.exists(targets[0]) and not os.path.exists(targets[1])
        assert f"DENIED {targets[0]}" in r.stdout and f"DENIED {targets[1]}" in r.stdout
        assert not os.path.exists(leak)  # /tmp inside is private (writes there vanish)
    finally:
        shutil.rmtree(outside, ignore_errors=True)
        if os.path.exists(leak):
            os.remove(leak)


@needs_bwrap
def test_own_pid_namespace_and_no_root():
    r = run_sandboxed("import os\nprint(os.getpid(), len([p for p in os.listdir('/proc') if p.isdigit()]))")
    pid, nprocs = map(int, r.stdout.split())
    assert pid <= 3 and nprocs <= 3  # only bwrap's init and the program are visible
    r = run_sandboxed("import os\nprint(os.getuid())\nopen('/proc/1/environ').read()")
    if os.geteuid() == 0:
        assert r.stdout.strip() == str(sandbox.NOBODY_ID)


# --------------------------------------------------------------------------- host visibility

_REPO = Path(__file__).resolve().parents[2]

# Prints one word per path: MISSING (not there), EMPTY (an empty folder), DENIED (there but
# closed to the sandbox user: still a leak of its existence), READ <n> / LISTED <n> (a leak).
_PEEK = """
import os, sys
for path in sys.stdin.read().split('\\n'):
    try:
        if os.path.isdir(path):
            names = os.listdir(path)
            print(path, 'LISTED %d' % len(names) if names else 'EMPTY')
        else:
            with open(path, 'rb') as fh:
                print(path, 'READ %d' % len(fh.read()))
    except FileNotFoundError:
        print(path, 'MISSING')
    except PermissionError:
        print(path, 'DENIED')
"""


def _venv_site_packages() -> list[str]:
    if sys.prefix == sys.base_prefix:
        return []
    return [p for p in sys.path if p.startswith(sys.prefix) and p.endswith("site-packages")]


def _host_paths() -> list:
    paths = [
        ("etc-passwd", "/etc/passwd"),
        ("etc-hostname", "/etc/hostname"),
        ("work", "/work"),
        ("root", "/root"),
        ("home", "/home"),
        ("opt", "/opt"),
        ("repo-file", str(_REPO / "src" / "hista" / "__init__.py")),
        ("repo", str(_REPO)),
        ("venv-site-packages", (_venv_site_packages() or [""])[0]),
    ]
    return [pytest.param(path, id=name) for name, path in paths]


@needs_bwrap
@pytest.mark.parametrize("path", _host_paths())
def test_host_path_is_invisible(path):
    if not path or not os.path.exists(path):
        pytest.skip(f"{path or 'that path'} does not exist on this host")
    r = run_sandboxed(_PEEK, path)
    assert r.ok, r.stderr
    assert r.stdout.split() in ([path, "MISSING"], [path, "EMPTY"]), r.stdout


@needs_bwrap
def test_root_holds_only_what_python_needs():
    code = (
        "import collections, fractions, heapq, itertools, json, math, re, os, sys\n"
        "c = collections.Counter(re.findall(r'\\w+', sys.stdin.read()))\n"
        "print(json.dumps(sorted(c.items())), math.comb(10, 3), fractions.Fraction(1, 3) * 3)\n"
        "for folder in ['/', '/etc', '/usr']:\n"
        "    print(json.dumps(os.listdir(folder)))\n"
    )
    r = run_sandboxed(code, "b a b\n")
    assert r.ok, r.stderr
    out, root, etc, usr = r.stdout.splitlines()
    assert out == '[["a", 1], ["b", 2]] 120 1'
    assert set(json.loads(root)) <= {"usr", "lib", "lib64", "lib32", "libx32", "etc", "tmp", "dev", "proc"}
    assert set(json.loads(etc)) <= {"ld.so.cache"}  # no passwd, hostname, resolv.conf, ...
    py = os.path.realpath(sandbox.sandbox_python())
    allowed = {"lib", "lib64", "lib32", "libx32"}
    if py.startswith("/usr/"):
        allowed.add(py.split("/")[2])  # /usr/bin for the interpreter, /usr/local for its prefix
    assert set(json.loads(usr)) <= allowed


@needs_bwrap
def test_host_passwd_cannot_be_echoed_through_the_verifier():
    from hista.rewards import verify_with_reason

    if not os.access("/etc/passwd", os.R_OK):
        pytest.skip("no readable /etc/passwd on this host")
    with open("/etc/passwd", encoding="utf-8", errors="replace") as fh:
        first = fh.readline().strip()
    prog = "```python\nprint(open('/etc/passwd').readline().strip())\n```"
    cases = [{"input": "", "output": first}]
    score, reason = verify_with_reason("code", prog, cases)
    assert score == 0.0 and reason.startswith("runtime error on case 1/1"), reason
    assert "FileNotFoundError" in reason


@needs_bwrap
def test_root_and_dev_are_read_only_shm_and_workdir_writable():
    code = (
        "import multiprocessing, os\n"
        "for path in ['/x', '/usr/x', '/etc/x', '/dev/x', '/dev/shm/x', '/tmp/x', 'x']:\n"
        "    try:\n"
        "        open(path, 'w').write('1')\n"
        "        print(path, 'WROTE')\n"
        "    except OSError as exc:\n"
        "        print(path, type(exc).__name__)\n"
        "open('/dev/null', 'w').write('discarded')\n"
        "lock = multiprocessing.Lock()\n"
        "with lock:\n"
        "    print('LOCK OK')\n"
    )
    r = run_sandboxed(code)
    assert r.ok, r.stderr
    got = dict(line.split(" ", 1) for line in r.stdout.splitlines())
    assert got.pop("LOCK") == "OK"
    assert got == {
        "/x": "OSError", "/usr/x": "OSError", "/etc/x": "OSError", "/dev/x": "OSError",
        "/dev/shm/x": "WROTE", "/tmp/x": "WROTE", "x": "WROTE",
    }


@needs_bwrap
def test_workdir_is_on_the_capped_private_tmpfs():
    if not sandbox.bwrap_caps_tmpfs():
        pytest.skip("this bubblewrap cannot cap a tmpfs (--size)")
    cap_mb = sandbox.TMPFS_BYTES // 2**20
    code = (
        "import os\n"
        "block = b'x' * 2**20\n"
        "written = 0\n"
        "try:\n"
        f"    for k in range({cap_mb + 16}):\n"
        "        with open(f'f{k // 8}.bin', 'ab') as fh:\n"  # 8 MiB per file, under RLIMIT_FSIZE
        "            fh.write(block)\n"
        "            fh.flush()\n"
        "        written += 1\n"
        "except OSError as exc:\n"
        "    print(type(exc).__name__, exc.errno)\n"
        "print(written)\n"
    )
    r = run_sandboxed(code, timeout_s=20.0)
    assert r.ok, r.stderr
    assert int(r.stdout.split()[-1]) < cap_mb + 16  # the tmpfs filled up: not the host's disk


# --------------------------------------------------------------------------- reason strings

# ANSI colour / title / erase sequences, a carriage return, NUL, BEL and a bidi override
_NASTY = "\r\x1b[31m\x1b]0;title\x07" + "\x00\x1b[2K\u202e\x07" * 200 + "tail"


def _printable_ascii(text: str) -> bool:
    return all(0x20 <= ord(ch) < 0x7F for ch in text)


def test_wrong_output_reason_is_short_and_printable():
    from hista.rewards import verify_with_reason

    prog = f"```python\nprint({_NASTY!r})\n```"
    score, reason = verify_with_reason("code", prog, [{"input": "", "output": "42"}])
    assert score == 0.0 and reason.startswith("wrong output on case 1/1"), reason
    assert len(reason) <= 200 and _printable_ascii(reason), reason
    assert "got '\\r\\x1b[31m\\x1b]0;title\\x07\\x00" in reason  # escapes, not the bytes


def test_runtime_error_reason_is_short_and_printable():
    from hista.rewards import verify_with_reason

    prog = f"```python\nimport sys\nsys.stderr.write({_NASTY!r})\nsys.exit(1)\n```"
    score, reason = verify_with_reason("code", prog, [{"input": "", "output": "42"}])
    assert score == 0.0 and reason.startswith("runtime error on case 1/1"), reason
    assert len(reason) <= 200 and _printable_ascii(reason), reason


def test_reason_points_at_the_first_differing_line():
    from hista.rewards import verify_with_reason

    prog = "```python\nfor i in range(5):\n    print(i if i != 3 else 'x' * 500)\n```"
    cases = [{"input": "", "output": "0\n1\n2\n3\n4"}]
    score, reason = verify_with_reason("code", prog, cases)
    assert score == 0.0
    assert reason.startswith("wrong output on case 1/1: got 'xxx") and len(reason) <= 200
    assert reason.endswith("'... (line 4; got 5 lines, expected 5; line is 500 chars)"), reason
    score, reason = verify_with_reason("code", "```python\nprint(0)\n```", cases)
    assert reason == "wrong output on case 1/1: output ends after 1 of 5 lines"


# --------------------------------------------------------------------------- fallback


def test_subprocess_fallback_warns(monkeypatch):
    monkeypatch.setenv("HISTA_SANDBOX_BACKEND", "subprocess")
    sandbox.reset_backend()
    try:
        with pytest.warns(RuntimeWarning, match="no filesystem, network or PID isolation"):
            assert sandbox_backend() == "subprocess"
        r = run_sandboxed("print(input())", "hi\n")
        assert r.ok and r.stdout == "hi\n" and r.backend == "subprocess"
        r = run_sandboxed("while True: pass", timeout_s=0.5)
        assert r.timed_out
    finally:
        monkeypatch.delenv("HISTA_SANDBOX_BACKEND")
        sandbox.reset_backend()
    assert sandbox_backend() in ("bwrap", "subprocess")


def test_forced_backend_invalid(monkeypatch):
    monkeypatch.setenv("HISTA_SANDBOX_BACKEND", "docker")
    sandbox.reset_backend()
    try:
        with pytest.raises(ValueError, match="auto, bwrap, subprocess"):
            sandbox_backend()
    finally:
        monkeypatch.delenv("HISTA_SANDBOX_BACKEND")
        sandbox.reset_backend()
