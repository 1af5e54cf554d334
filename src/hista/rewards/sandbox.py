"""Process sandbox for generated code (§12 "Security").

Generated programs never run inside the trainer's process.  ``run_sandboxed`` writes the
program to a fresh ``tempfile.mkdtemp()`` folder and runs it in a child process:

* **bubblewrap** (``bwrap``, backend ``"bwrap"``): an empty root holding only what the
  interpreter needs, all read-only (see "What the program sees" below), a private size-capped
  tmpfs on ``/tmp`` that holds the working directory, a fresh minimal ``/dev`` (its
  ``/dev/shm`` a small capped tmpfs) and ``/proc``, new user, PID, network, IPC, UTS and cgroup
  namespaces (no network: only a down loopback device), ``--die-with-parent``,
  ``--new-session`` (no terminal injection), no capabilities, no nested user namespaces.  Only
  the private ``/tmp`` and ``/dev/shm`` are writable; nothing the program writes reaches the
  host's disk.
* **rlimits**, applied *inside* the sandbox by a tiny Python wrapper that then ``exec``s the
  program: ``RLIMIT_CPU`` (CPU seconds), ``RLIMIT_AS`` (memory), ``RLIMIT_NPROC``
  (processes and threads), ``RLIMIT_FSIZE`` (largest file) and ``RLIMIT_CORE = 0``.
* **Wall-clock timeout**: the child starts in its own session / process group; on timeout,
  on output flooding and after every run the whole group gets ``SIGKILL``.  With bwrap the
  program is PID 1's child in its own PID namespace, so killing bwrap tears down the whole
  namespace: background children (``sleep 1000 &``) die with it.
* **Bounded output**: stdout and stderr are read incrementally; once either exceeds
  ``max_output_bytes`` the output is truncated there and the process group is killed, so
  memory use of the caller stays bounded.

How the process limit (fork storms) is enforced
-----------------------------------------------
``RLIMIT_NPROC`` is not enforced for the root user (real uid 0 in the initial user
namespace, even when mapped to another uid inside a user namespace), and it normally counts
*all* processes of the user on the machine.  Therefore:

1. when the caller is root, the sandbox is started as ``nobody`` (uid/gid 65534, via
   ``subprocess.Popen(user=..., group=..., extra_groups=[])`` -- no ``preexec_fn``, which is
   unsafe in threaded programs), so the kernel enforces the limit;
2. ``RLIMIT_NPROC`` is set by the wrapper *inside* the fresh user namespace that bwrap
   creates.  Since Linux 5.14 the process count is kept per user namespace, so the limit
   counts only the sandbox's own processes -- concurrent sandboxes and the trainer's threads
   do not eat each other's budget.

A consequence is that the interpreter must be accessible to ``nobody``: ``sandbox_python()``
probes ``$HISTA_SANDBOX_PYTHON``, ``sys.executable``, ``python3`` on ``PATH``,
``/usr/bin/python3`` and ``/usr/local/bin/python3`` in that order and keeps the first that
starts inside the sandbox and imports ``json, math, collections, re`` there.  A candidate that
belongs to a virtual environment is replaced by the base interpreter the environment was made
from (``sys._base_executable``, real path), so the venv (its ``site-packages``, its
``pyvenv.cfg``) stays out of the sandbox: programs get the standard library and the base
installation's packages only.

What the program sees (bwrap)
-----------------------------
The host's ``/`` is *not* bound.  The new root is an empty tmpfs, remounted read-only once
these are in place (each read-only; a host path that is a symlink, as ``/lib -> usr/lib`` on
merged-``/usr`` systems, is recreated as the same symlink):

* ``/usr/lib``, ``/usr/lib64``, ``/lib``, ``/lib64`` where present: the dynamic loader
  (``/lib64/ld-linux-*.so``) and the C libraries the interpreter links (libc, libm, libz,
  libexpat, libffi, libssl, ...), and on Debian-like systems the system Python's standard
  library (``/usr/lib/python3.X``);
* ``<prefix>/lib`` and ``<prefix>/lib64`` of the interpreter's ``sys.base_prefix`` and
  ``sys.base_exec_prefix`` (standard library, ``lib-dynload``, ``libpython``) when they are not
  under the directories above, e.g. ``/usr/local/lib`` or ``~/.pyenv/versions/3.X/lib``;
* the interpreter's executable itself (its real path, a single file);
* ``/etc/ld.so.cache`` only (when present): the loader's index of library directories, needed
  when ``libpython`` lives outside the default ones (``/usr/local/lib``).  Python needs nothing
  else from ``/etc``: no ``/etc/passwd`` (``pwd.getpwuid`` raises ``KeyError``), no
  ``/etc/localtime`` (local time is UTC), no resolver files;
* ``/tmp`` (private tmpfs, ``TMPFS_BYTES``) holding the working directory
  ``/tmp/<name of the host folder>`` with ``main.py`` (bound read-only) in it; ``HOME`` and the
  current directory point there;
* ``/dev`` (bwrap's minimal ``null``, ``zero``, ``full``, ``random``, ``urandom``, ``tty``,
  ``pts``), read-only except ``/dev/shm`` (``SHM_BYTES`` tmpfs, for ``multiprocessing``), and
  ``/proc`` of the sandbox's own PID namespace.

So the rest of ``/etc``, ``/home``, ``/root``, ``/work``, ``/opt``, ``/srv``, ``/var``, the
repository, the venv and the rest of ``/usr`` (``/usr/bin``, ``/usr/share``, ``/usr/local``
outside the interpreter's prefix) do not exist inside: opening or listing them fails with
``FileNotFoundError``.  There is no shell (``/bin/sh``) either, so ``os.system`` and
``shell=True`` fail; ``sys.executable`` can still start sub-interpreters.  ``/proc`` still
shows machine-wide kernel facts (``/proc/cpuinfo``, ``/proc/meminfo``), not host files.

Fallback
--------
Only when ``HISTA_SANDBOX_BACKEND=subprocess`` asks for it, the backend is ``"subprocess"``: the
same wrapper, rlimits, fresh working directory, process-group kill and (when root) the drop to
``nobody``, but **no** filesystem, network or PID isolation: the program can read every host file
its user can read (``/etc/passwd``, world-readable parts of the repository and home folders, a
dataset with its reference solutions, which a completion can copy to score without solving;
root-only files such as ``/root`` stay closed when the caller is root, as the program then runs
as ``nobody``) and list the host's folders.  A ``RuntimeWarning`` says so once per process.
Where bubblewrap is missing or cannot start and the fallback was not asked for (``auto``, the
default, or ``bwrap``), no program runs: ``SandboxUnavailable`` says why and the verifiers give
0.0 with that reason.

Two programs, one boundary
--------------------------
:func:`run_judged` runs a trusted program (the *judge*) and an untrusted one (the *subject*) in
two sandboxes of their own, connected only by two pipes: the ``python-tests`` verifier's trust
boundary (:mod:`hista.rewards.boundary`).  Under bubblewrap each has its own namespaces, root and
``/tmp``; the subject never sees the judge's process, files or input.  The judge reads its input
from stdin (never a file) and makes itself non-dumpable, so that in the fallback the subject,
started only after the judge has read it, cannot open the judge's ``/proc`` files either.

Known limits: memory is limited per process (``RLIMIT_AS``), so a program may use up to
``max_processes * memory_mb`` in total, plus ``TMPFS_BYTES + SHM_BYTES`` of files in its
tmpfs mounts; in the ``"subprocess"`` fallback the working directory is on the host
filesystem (each file is capped by ``RLIMIT_FSIZE`` but not the number of files within the
time limit).
"""

from __future__ import annotations

import errno
import json
import math
import os
import selectors
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

__all__ = [
    "SandboxResult",
    "Service",
    "run_judged",
    "run_sandboxed",
    "sandbox_backend",
    "sandbox_python",
    "SandboxUnavailable",
]

#: uid/gid the sandbox runs as when the caller is root (``nobody`` on Linux).
NOBODY_ID = 65534
#: size of the private ``/tmp`` tmpfs inside bwrap (it holds the working directory).
TMPFS_BYTES = 64 * 1024 * 1024
#: size of the private ``/dev/shm`` tmpfs inside bwrap (POSIX semaphores of ``multiprocessing``).
SHM_BYTES = 16 * 1024 * 1024
#: host directories of the dynamic loader and shared libraries, bound read-only when present.
LIB_DIRS = ("/usr/lib", "/usr/lib64", "/lib", "/lib64")
#: the only host files of ``/etc`` bound (read-only, when present): the loader's cache.
ETC_FILES = ("/etc/ld.so.cache",)
_PROGRAM = "main.py"
#: how long a judged run waits, once the judge failed, for the subject to exit by itself
SUBJECT_GRACE_S = 0.25
_READ_CHUNK = 65536

# Runs first inside the sandbox, in the interpreter that then runs the program: ``limit(cpu,
# mem, nproc, fsize)`` lowers the rlimits (soft = hard, so the program cannot raise them again).
_LIMITS = r"""
import os, resource, sys
def _lim(name, soft, hard=None):
    r = getattr(resource, name, None)
    if r is None:
        return
    hard = soft if hard is None else hard
    old_soft, old_hard = resource.getrlimit(r)
    if old_hard != resource.RLIM_INFINITY:
        hard = min(hard, old_hard)
        soft = min(soft, hard)
    resource.setrlimit(r, (soft, hard))
def limit(cpu, mem, nproc, fsize):
    _lim("RLIMIT_CPU", cpu, cpu + 1)
    if mem > 0:
        _lim("RLIMIT_AS", mem)
    _lim("RLIMIT_NPROC", nproc)
    _lim("RLIMIT_FSIZE", fsize)
    _lim("RLIMIT_CORE", 0)
limit(*(int(x) for x in sys.argv[1:5]))
del sys.argv[1:5]
"""
# ``python3 -I -S -c _WRAPPER cpu mem nproc fsize argv...``: the limits, then exec ``argv``.
_WRAPPER = _LIMITS + "os.execv(sys.argv[1], sys.argv[1:])\n"


class SandboxUnavailable(RuntimeError):
    """Raised when no sandbox backend can run programs here, or the backend forced by
    ``HISTA_SANDBOX_BACKEND`` cannot."""


@dataclass(frozen=True)
class SandboxResult:
    """Outcome of one sandboxed run.

    ``returncode`` is the program's exit status (negative: killed by that signal; bwrap
    reports a signal death as ``128 + signal``); ``timed_out`` means the wall-clock limit
    killed it; ``truncated`` means stdout or stderr exceeded ``max_output_bytes`` and the
    process group was killed.  ``stdout``/``stderr`` are decoded as UTF-8 with replacement.
    """

    returncode: Optional[int]
    stdout: str
    stderr: str
    timed_out: bool
    truncated: bool
    elapsed_s: float
    backend: str

    @property
    def ok(self) -> bool:
        """True when the program exited with status 0 within its limits."""
        return self.returncode == 0 and not self.timed_out and not self.truncated


# --------------------------------------------------------------------------- backend


_lock = threading.Lock()
_backend: Optional[str] = None
_python: Optional[str] = None
_bwrap_extra: tuple[str, ...] = ()  # version-dependent bwrap flags, then the filesystem binds
_warned = False
_failure: Optional[SandboxUnavailable] = None  # why no backend can run, kept until reset_backend()

# Asked of each candidate on the host (``python -I -S -c _DESCRIBE``): the interpreter to run
# (a venv's base interpreter) and the prefixes whose ``lib`` folders it loads from.
_DESCRIBE = (
    "import json, os, sys; print(json.dumps([os.path.realpath("
    "getattr(sys, '_base_executable', '') or sys.executable), "
    "sys.base_prefix, sys.base_exec_prefix]))"
)
_FLAGS = ("--disable-userns",)


def _is_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def _python_candidates() -> list[str]:
    seen: list[str] = []
    for cand in (
        os.environ.get("HISTA_SANDBOX_PYTHON"),
        sys.executable,
        shutil.which("python3"),
        "/usr/bin/python3",
        "/usr/local/bin/python3",
    ):
        if cand and os.path.isabs(cand) and os.path.exists(cand) and cand not in seen:
            seen.append(cand)
    return seen


def _describe(candidate: str) -> Optional[tuple[str, tuple[str, ...]]]:
    """``(interpreter, read-only bwrap filesystem arguments)`` for a candidate, or None when it
    does not start on the host.  A venv's interpreter is replaced by its base interpreter."""
    try:
        out = subprocess.run(
            [candidate, "-I", "-S", "-c", _DESCRIBE],
            capture_output=True, text=True, timeout=15, env={"PATH": "/usr/bin:/bin"},
        )
        python, *prefixes = json.loads(out.stdout)
    except (OSError, subprocess.SubprocessError, ValueError, TypeError):
        return None
    if out.returncode != 0 or not isinstance(python, str) or not os.path.isabs(python):
        return None
    return python, _fs_args(python, [p for p in prefixes if isinstance(p, str)])


def _fs_args(python: str, prefixes: Sequence[str]) -> tuple[str, ...]:
    """bwrap arguments binding read-only what ``python`` needs: ``LIB_DIRS``, ``<prefix>/lib``
    and ``<prefix>/lib64`` of ``prefixes``, the executable, ``ETC_FILES`` (module docstring)."""
    args: list[str] = []
    bound: list[str] = []

    def covered(path: str) -> bool:
        return any(path == b or path.startswith(b.rstrip("/") + "/") for b in bound)

    def add(path: str) -> None:
        if os.path.islink(path):  # recreate the link, bind its target
            if not covered(os.path.dirname(path)):  # cannot create inside a read-only bind
                args.extend(("--symlink", os.readlink(path), path))
        path = os.path.realpath(path)
        if os.path.exists(path) and path != "/" and not covered(path):
            args.extend(("--ro-bind", path, path))
            bound.append(path)

    for d in LIB_DIRS:
        add(d)
    for prefix in dict.fromkeys(os.path.realpath(p) for p in prefixes if os.path.isabs(p)):
        for sub in ("lib", "lib64"):
            add(os.path.join(prefix, sub))
    add(python)
    for f in ETC_FILES:
        if os.path.isfile(f):
            add(f)
    return tuple(args)


_PROBE = "import json, math, collections, re\nprint('hista-sandbox-ok')\n"


def _probe(backend: str, python: str, extra: Sequence[str]) -> bool:
    workdir = _make_workdir()
    try:
        res = _run_in(
            backend,
            python,
            extra,
            workdir,
            _PROBE,
            "",
            timeout_s=15.0,
            memory_mb=512,
            max_processes=16,
            max_output_bytes=4096,
            cpu_s=10,
            file_size_mb=1,
        )
    except OSError:
        return False
    finally:
        _remove_tree(workdir)
    return res.returncode == 0 and res.stdout.strip() == "hista-sandbox-ok"


def _select_backend() -> tuple[str, str, tuple[str, ...]]:
    forced = os.environ.get("HISTA_SANDBOX_BACKEND", "auto").strip().lower() or "auto"
    if forced not in ("auto", "bwrap", "subprocess"):
        raise ValueError(
            f"HISTA_SANDBOX_BACKEND={forced!r}; valid values: auto, bwrap, subprocess"
        )
    candidates = _python_candidates()
    described = list(dict.fromkeys(d for d in map(_describe, candidates) if d is not None))
    if forced in ("auto", "bwrap") and shutil.which("bwrap"):
        # Newer flags first; older bubblewrap releases lack --disable-userns / --size.
        for flags in (_FLAGS, ()):
            for py, fs in described:
                if _probe("bwrap", py, flags + fs):
                    return "bwrap", py, flags + fs
    if forced != "subprocess":
        raise SandboxUnavailable(
            f"bubblewrap is missing or cannot start here (HISTA_SANDBOX_BACKEND={forced}): install the "
            "'bubblewrap' package and allow user namespaces; HISTA_SANDBOX_BACKEND=subprocess runs code "
            "without file-system isolation, where a program can read the host's files (datasets with "
            "their reference solutions) and game its reward"
        )
    for py in dict.fromkeys([py for py, _ in described] + candidates):
        if _probe("subprocess", py, ()):
            return "subprocess", py, ()
    raise SandboxUnavailable(
        f"no Python interpreter can run in the sandbox (tried {', '.join(candidates) or 'none'})"
    )


def _ensure_backend() -> tuple[str, str, tuple[str, ...]]:
    global _backend, _python, _bwrap_extra, _warned, _failure
    with _lock:
        if _failure is not None:
            raise _failure
        if _backend is None:
            try:
                _backend, _python, _bwrap_extra = _select_backend()
            except SandboxUnavailable as exc:
                _failure = exc
                raise
        if _backend != "bwrap" and not _warned:
            _warned = True
            warnings.warn(
                "hista sandbox: HISTA_SANDBOX_BACKEND=subprocess; generated code runs as a plain "
                "subprocess with rlimits and a fresh working directory only -- no filesystem, "
                "network or PID isolation: it can read every host file its user can read, "
                "datasets and their reference solutions included, so its rewards can be gamed "
                "(install 'bubblewrap' for the full sandbox)",
                RuntimeWarning,
                stacklevel=3,
            )
        return _backend, _python, _bwrap_extra  # type: ignore[return-value]


def reset_backend() -> None:
    """Forget the probed backend, so that the next run probes again: after installing
    bubblewrap or changing ``HISTA_SANDBOX_BACKEND``."""
    global _backend, _python, _bwrap_extra, _warned, _failure
    with _lock:
        _backend, _python, _bwrap_extra, _warned, _failure = None, None, (), False, None


def sandbox_backend() -> str:
    """Name of the sandbox backend in use, ``"bwrap"`` or ``"subprocess"``.

    Probed once per process (a trivial program is run); ``"subprocess"`` only when
    ``HISTA_SANDBOX_BACKEND=subprocess`` asks for it, with a ``RuntimeWarning`` once. Raises
    ``SandboxUnavailable`` (again on every call, until :func:`reset_backend`) when bubblewrap
    cannot run and that was not asked for.
    """
    return _ensure_backend()[0]


def sandbox_python() -> str:
    """Interpreter that runs sandboxed programs: the first candidate (a venv's base
    interpreter in its place) that starts inside the sandbox (module docstring)."""
    return _ensure_backend()[1]


# --------------------------------------------------------------------------- running


def _make_workdir() -> str:
    workdir = tempfile.mkdtemp(prefix="hista-sbx-")
    if _is_root():
        os.chown(workdir, NOBODY_ID, NOBODY_ID)
    return workdir


def _remove_tree(path: str) -> None:
    def retry(func, p, _exc):  # make read-only / mode-000 entries removable, retry once
        try:
            os.chmod(os.path.dirname(p), stat.S_IRWXU)
            if os.path.isdir(p) and not os.path.islink(p):
                os.chmod(p, stat.S_IRWXU)
            func(p)
        except OSError:
            pass

    if sys.version_info >= (3, 12):
        shutil.rmtree(path, onexc=retry)
    else:
        shutil.rmtree(path, onerror=retry)


def _env(home: str, tmpdir: str = "/tmp") -> dict[str, str]:
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": home,
        "TMPDIR": tmpdir,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "PYTHONIOENCODING": "utf-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONHASHSEED": "0",
    }


def _inside(workdir: str) -> str:
    """The working directory's path inside bwrap: a folder of the private ``/tmp``."""
    return "/tmp/" + os.path.basename(workdir)


def _bwrap_prefix(workdir: str, extra: Sequence[str], service: Optional[Sequence[str]] = None) -> list[str]:
    """bwrap and its arguments up to the command: the namespaces, the read-only root of ``extra``,
    and the working directory on the private ``/tmp`` with ``main.py`` in it when there is one.
    For a service, ``service`` holds its read-only binds, and ``/tmp`` is read-only too."""
    def tmpfs(path: str, size: int) -> list[str]:
        return (["--size", str(size)] if bwrap_caps_tmpfs() else []) + ["--tmpfs", path]

    inside = _inside(workdir)
    file = os.path.join(workdir, _PROGRAM)
    program = ["--ro-bind", file, os.path.join(inside, _PROGRAM)] if os.path.exists(file) else []
    return [
        "bwrap",
        *extra,  # flags (any position) and the read-only binds, which come first
        "--dev", "/dev",
        *tmpfs("/dev/shm", SHM_BYTES),
        "--proc", "/proc",
        *tmpfs("/tmp", TMPFS_BYTES),
        "--dir", inside,
        *program,
        *([] if service is None else [*service, "--remount-ro", "/tmp"]),
        "--remount-ro", "/dev",
        "--remount-ro", "/",
        "--chdir", inside,
        "--unshare-user",
        "--unshare-pid",
        "--unshare-net",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--hostname", "sandbox",
        "--die-with-parent",
        "--new-session",
        "--cap-drop", "ALL",
        "--",
    ]


_has_size: Optional[bool] = None


def bwrap_caps_tmpfs() -> bool:
    """Whether this machine's bubblewrap understands ``--size``, which caps the program's
    private ``/tmp``; probed once."""
    global _has_size
    if _has_size is None:
        try:
            out = subprocess.run(["bwrap", "--help"], capture_output=True, text=True, timeout=10)
            _has_size = "--size" in (out.stdout + out.stderr)
        except (OSError, subprocess.SubprocessError):
            _has_size = False
    return _has_size


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    except OSError as exc:  # pragma: no cover - defensive
        if exc.errno != errno.ESRCH:
            raise
    try:
        proc.kill()
    except OSError:
        pass


def _launch(backend: str, python: str, extra: Sequence[str], workdir: str, inner: Sequence[str],
            stdin: Optional[bytes], pass_fds: Sequence[int] = (), binds: Sequence[str] = ()) -> subprocess.Popen:
    """Start ``inner`` (the interpreter's command line) in the sandbox of ``backend`` with ``stdin``
    (an unlinked temporary file: no pipe to feed, no deadlock), in its own session, with no file
    descriptor of this process but ``pass_fds``; as ``nobody`` when the caller is root. ``stdin``
    None starts a service (:class:`Service`): stdin a pipe, stderr discarded, ``/tmp`` read-only,
    ``binds`` (bwrap's read-only binds) added, ``TMPDIR`` its only writable folder (``/dev/shm``
    under bubblewrap, else ``scratch`` in its folder)."""
    service = stdin is None
    home = _inside(workdir) if backend == "bwrap" else workdir
    tmpdir = "/tmp" if not service else "/dev/shm" if backend == "bwrap" else os.path.join(workdir, "scratch")
    cmd = (_bwrap_prefix(workdir, extra, binds if service else None) + list(inner) if backend == "bwrap"
           else list(inner))
    drop: dict = {"user": NOBODY_ID, "group": NOBODY_ID, "extra_groups": []} if _is_root() else {}
    with tempfile.TemporaryFile() as stdin_file:
        if not service:
            stdin_file.write(stdin)
            stdin_file.seek(0)
        return subprocess.Popen(cmd, stdin=subprocess.PIPE if service else stdin_file, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL if service else subprocess.PIPE, cwd=workdir,
                                env=_env(home, tmpdir),
                                start_new_session=True, close_fds=True, pass_fds=tuple(pass_fds), **drop)


class _Streams:
    """The stdout and stderr of running sandboxed processes, read as they come into buffers of at
    most ``max_bytes`` each; ``truncated`` once one overflowed."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.truncated = False
        self.sel = selectors.DefaultSelector()
        self.bufs: dict[int, bytearray] = {}  # by file descriptor
        self.fds: dict[int, tuple[int, int]] = {}  # by process id: stdout's and stderr's

    def add(self, proc: subprocess.Popen) -> None:
        self.fds[proc.pid] = (proc.stdout.fileno(), proc.stderr.fileno())
        for fd in self.fds[proc.pid]:
            self.bufs[fd] = bytearray()
            self.sel.register(fd, selectors.EVENT_READ)

    def open(self, proc: subprocess.Popen) -> bool:
        """Whether ``proc`` may still write: one of its streams has not reached its end."""
        registered = self.sel.get_map()
        return any(fd in registered for fd in self.fds[proc.pid])

    def stdout(self, proc: subprocess.Popen) -> bytes:
        return bytes(self.bufs[self.fds[proc.pid][0]])

    def read_until(self, done: Callable[[], bool], deadline: float) -> bool:
        """Read until ``done()`` or an overflow; False when ``deadline`` (monotonic) came first."""
        while not (done() or self.truncated):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            for key, _ in self.sel.select(timeout=min(remaining, 0.25)):
                try:
                    chunk = os.read(key.fd, _READ_CHUNK)
                except OSError:
                    chunk = b""
                if not chunk:
                    self.sel.unregister(key.fd)
                    continue
                buf = self.bufs[key.fd]
                room = self.max_bytes - len(buf)
                buf += chunk[: max(room, 0)]
                if len(chunk) > room:
                    self.truncated = True
                    break
        return True

    def result(self, proc: subprocess.Popen, timed_out: bool, start: float, backend: str) -> SandboxResult:
        """The outcome of ``proc``, which has ended."""
        out, err = (bytes(self.bufs[fd]).decode("utf-8", errors="replace") for fd in self.fds[proc.pid])
        return SandboxResult(returncode=proc.returncode, stdout=out, stderr=err,
                             timed_out=timed_out, truncated=self.truncated, elapsed_s=time.monotonic() - start,
                             backend=backend)


def _reap(proc: subprocess.Popen, deadline: float) -> None:
    """Wait for ``proc`` to exit until ``deadline`` (monotonic), no longer."""
    try:
        proc.wait(timeout=max(deadline - time.monotonic(), 0.0))
    except subprocess.TimeoutExpired:
        pass


def _end(proc: subprocess.Popen) -> None:
    """Kill ``proc``'s whole group (background children must not outlive a run) and reap it."""
    _kill_group(proc)
    proc.wait()
    proc.stdout.close()
    proc.stderr.close()


def _limit_args(memory_mb: int, max_processes: int, cpu_s: int, file_size_mb: int) -> list[str]:
    return [str(max(1, int(cpu_s))), str(int(memory_mb) * 1024 * 1024 if memory_mb else 0),
            str(max(1, int(max_processes))), str(max(1, int(file_size_mb)) * 1024 * 1024)]


def _write_program(workdir: str, code: str) -> None:
    prog = os.path.join(workdir, _PROGRAM)
    with open(prog, "w", encoding="utf-8", errors="surrogatepass") as fh:
        fh.write(code)
    os.chmod(prog, 0o644)


def _run_in(backend: str, python: str, extra: Sequence[str], workdir: str, code: str, stdin: str, *,
            timeout_s: float, memory_mb: int, max_processes: int, max_output_bytes: int, cpu_s: int,
            file_size_mb: int) -> SandboxResult:
    _write_program(workdir, code)
    limits = _limit_args(memory_mb, max_processes, cpu_s, file_size_mb)
    start = time.monotonic()
    proc = _launch(backend, python, extra, workdir, [python, "-I", "-S", "-c", _WRAPPER, *limits, python, "-s",
                                                     _PROGRAM], stdin.encode("utf-8", errors="replace"))
    deadline = start + float(timeout_s)
    streams = _Streams(max_output_bytes)
    try:
        streams.add(proc)
        timed_out = not streams.read_until(lambda: not streams.open(proc), deadline)
        if not timed_out and not streams.truncated:
            try:
                proc.wait(timeout=max(deadline - time.monotonic(), 0.0))
            except subprocess.TimeoutExpired:
                timed_out = True
    finally:
        streams.sel.close()
        _end(proc)
    return streams.result(proc, timed_out, start, backend)


def _check_limits(timeout_s: float, max_output_bytes: int) -> None:
    if not timeout_s > 0:
        raise ValueError(f"timeout_s must be > 0, got {timeout_s!r}")
    if max_output_bytes < 0:
        raise ValueError(f"max_output_bytes must be >= 0, got {max_output_bytes!r}")


def run_sandboxed(
    code: str,
    stdin: str = "",
    *,
    timeout_s: float = 5.0,
    memory_mb: int = 512,
    max_processes: int = 64,
    max_output_bytes: int = 65536,
    cpu_s: Optional[float] = None,
    file_size_mb: int = 16,
) -> SandboxResult:
    """Run the Python program ``code`` with ``stdin`` in the sandbox and return its outcome.

    Limits: ``timeout_s`` wall-clock seconds (the whole process tree is killed), ``cpu_s``
    CPU seconds per process (default: ``ceil(timeout_s) + 1``), ``memory_mb`` address space
    per process (0: unlimited), ``max_processes`` processes/threads in the sandbox,
    ``max_output_bytes`` per stream (beyond it the output is truncated and the run killed),
    ``file_size_mb`` per written file.  The working directory is a fresh
    ``tempfile.mkdtemp()`` folder, removed afterwards.  See the module docstring for the
    isolation each backend provides.  Raises only for caller errors (bad arguments) or when
    no backend can run programs at all (``SandboxUnavailable``).
    """
    if not isinstance(code, str):
        raise TypeError(f"code must be a str, not {type(code).__name__}")
    if not isinstance(stdin, str):
        raise TypeError(f"stdin must be a str, not {type(stdin).__name__}")
    _check_limits(timeout_s, max_output_bytes)
    backend, python, extra = _ensure_backend()
    cpu = int(math.ceil(cpu_s if cpu_s is not None else timeout_s + 1))
    workdir = _make_workdir()
    try:
        return _run_in(backend, python, extra, workdir, code, stdin, timeout_s=timeout_s, memory_mb=memory_mb,
                       max_processes=max_processes, max_output_bytes=max_output_bytes, cpu_s=cpu,
                       file_size_mb=file_size_mb)
    finally:
        _remove_tree(workdir)


class Service:
    """A long-lived program in the sandbox that answers on its standard output what it reads on its
    standard input (:func:`start_service`); :meth:`close` kills its whole process group."""

    def __init__(self, proc: subprocess.Popen, workdir: str) -> None:
        self.proc, self.workdir = proc, workdir

    @property
    def stdin(self):
        return self.proc.stdin

    @property
    def stdout(self):
        return self.proc.stdout

    def running(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        _kill_group(self.proc)
        self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout):
            pipe.close()
        _remove_tree(self.workdir)


def start_service(code: str, args: Sequence[str] = (), *, readable: Sequence[str] = (), memory_mb: int = 2048,
                  max_processes: int = 16, cpu_s: int = 86_400) -> Service:
    """Start the Python program ``code`` (with ``args``) as a :class:`Service` in the sandbox: the
    isolation of :func:`run_sandboxed` (module docstring), except that its only
    writable folder is ``$TMPDIR``, which the service owns (under bubblewrap its private
    ``/dev/shm``; its ``/tmp`` is read-only), stderr is discarded, and the folders ``readable``
    (their real paths) are bound read-only under bubblewrap. It runs as ``python -s main.py ARGS``
    in the sandbox's clean environment (``PYTHONHASHSEED=0``: the same hashes in every run), with
    its own folder first on ``sys.path`` (read-only). Limits per process: ``memory_mb`` address space,
    ``cpu_s`` CPU seconds, ``max_processes`` processes and threads in the sandbox."""
    backend, python, extra = _ensure_backend()
    binds: list[str] = []
    if backend == "bwrap":
        for path in dict.fromkeys(os.path.realpath(p) for p in readable):
            if os.path.isdir(path):
                binds += ["--ro-bind", path, path]
    workdir = tempfile.mkdtemp(prefix="hista-svc-")
    os.chmod(workdir, 0o755)
    try:
        _write_program(workdir, code)
        if backend != "bwrap":  # the service's scratch folder (under bubblewrap its private /dev/shm)
            os.mkdir(os.path.join(workdir, "scratch"), 0o700)
            if _is_root():
                os.chown(os.path.join(workdir, "scratch"), NOBODY_ID, NOBODY_ID)
        limits = _limit_args(memory_mb, max_processes, cpu_s, 1)
        proc = _launch(backend, python, extra, workdir,
                       [python, "-I", "-S", "-c", _WRAPPER, *limits, python, "-s", _PROGRAM, *args], None, binds=binds)
    except BaseException:
        _remove_tree(workdir)
        raise
    return Service(proc, workdir)


def run_judged(judge: str, judge_input: bytes, subject: str, module: str, *, timeout_s: float = 10.0,
               memory_mb: int = 1024, max_processes: int = 64, max_output_bytes: int = 65536,
               ) -> tuple[SandboxResult, Optional[SandboxResult]]:
    """Run a trusted program and an untrusted one, each in a sandbox of its own, connected only by
    two pipes: the *judge* (Python source; ``judge_input`` on its stdin) and the
    *subject* (Python source run with ``module`` as ``main.py`` in its working folder, stdin
    empty). Each is run as ``python -s -c SOURCE RFD WFD`` after the limits are set: it reads the
    other's messages from file descriptor RFD and writes its own to WFD. The subject shares no
    process, file, folder or namespace with the judge (under bubblewrap: separate user, PID, IPC
    and mount namespaces); in the rlimit-only fallback the judge first reads its input and
    prints a line, and the subject starts after that line. The run ends when the judge's output
    ends, on ``timeout_s`` wall-clock seconds or an overflow of ``max_output_bytes`` in any
    stream; both process groups are then killed (when the judge failed, once the subject exited
    by itself or ``SUBJECT_GRACE_S`` passed, so that its exit status is its own). Returns the
    judge's and the subject's outcomes (None when the subject never started). Limits as
    :func:`run_sandboxed`'s, per process."""
    _check_limits(timeout_s, max_output_bytes)
    backend, python, extra = _ensure_backend()
    limits = _limit_args(memory_mb, max_processes, int(math.ceil(timeout_s + 1)), 16)
    judge_dir, subject_dir = _make_workdir(), _make_workdir()
    run = _JudgedRun(backend, python, extra, limits, max_output_bytes, timeout_s)
    try:
        _write_program(subject_dir, module)
        run.launch(judge_dir, judge, judge_input, (run.to_judge[0], run.to_subject[1]))
        if run.judge_ready():
            run.launch(subject_dir, subject, b"", (run.to_subject[0], run.to_judge[1]))
        run.close_pipes()
        run.wait()
    finally:
        run.end()
        _remove_tree(judge_dir)
        _remove_tree(subject_dir)
    return run.results()


class _JudgedRun:
    """The judge and subject processes of one :func:`run_judged` call, the two pipes between
    them (``to_subject``, ``to_judge``: read and write ends each, until closed here), their
    streams and the run's deadline."""

    def __init__(self, backend: str, python: str, extra: Sequence[str], limits: list[str], max_output_bytes: int,
                 timeout_s: float) -> None:
        self.backend, self.python, self.extra, self.limits = backend, python, extra, limits
        self.to_subject, self.to_judge = os.pipe(), os.pipe()  # (read, write) each
        self.procs: list[subprocess.Popen] = []
        self.streams = _Streams(max_output_bytes)
        self.timed_out = False
        self.start = time.monotonic()
        self.deadline = self.start + float(timeout_s)

    def launch(self, workdir: str, source: str, stdin: bytes, ends: tuple[int, int]) -> None:
        """Start the program ``source`` in its sandbox, reading the other's messages from
        ``ends[0]`` and writing its own to ``ends[1]``: the judge first, then the subject."""
        self.procs.append(_launch(self.backend, self.python, self.extra, workdir,
                                  [self.python, "-s", "-c", _LIMITS + source, *self.limits, *map(str, ends)],
                                  stdin, ends))
        self.streams.add(self.procs[-1])

    def judge_ready(self) -> bool:
        """Whether the subject may start: the judge runs and has not overflowed its output; in the
        rlimit-only fallback, once it has printed its first line (the subject could see the judge
        in /proc before it has read its input)."""
        judge, streams = self.procs[0], self.streams
        if self.backend != "bwrap":
            self.timed_out = not streams.read_until(lambda: b"\n" in streams.stdout(judge) or not streams.open(judge),
                                                    self.deadline)
        return not self.timed_out and not streams.truncated and streams.open(judge)

    def close_pipes(self) -> None:
        """Close this process's ends of the pipes (the sandboxes hold their own)."""
        for fd in (*self.to_subject, *self.to_judge):
            os.close(fd)
        self.to_subject = self.to_judge = ()

    def wait(self) -> None:
        """Read the streams until the judge's output ends, and let it exit, within the deadline;
        when the judge failed, give the subject ``SUBJECT_GRACE_S`` to exit by itself, so that
        its exit status is its own."""
        judge, streams = self.procs[0], self.streams
        self.timed_out = self.timed_out or not streams.read_until(lambda: not streams.open(judge), self.deadline)
        if not self.timed_out and not streams.truncated:
            try:
                judge.wait(timeout=max(self.deadline - time.monotonic(), 0.0))
            except subprocess.TimeoutExpired:
                self.timed_out = True
        if not self.timed_out and len(self.procs) > 1 and judge.returncode != 0:  # the subject's own exit status
            grace = min(self.deadline, time.monotonic() + SUBJECT_GRACE_S)
            streams.read_until(lambda: not streams.open(self.procs[1]), grace)
            _reap(self.procs[1], min(self.deadline, time.monotonic() + SUBJECT_GRACE_S))

    def end(self) -> None:
        """Stop reading, close the pipes still open and kill both process groups."""
        self.streams.sel.close()
        self.close_pipes()
        for proc in self.procs:
            _end(proc)

    def results(self) -> tuple[SandboxResult, Optional[SandboxResult]]:
        """The judge's and the subject's outcomes (None when the subject never started)."""
        results = [self.streams.result(proc, self.timed_out, self.start, self.backend) for proc in self.procs]
        return results[0], (results[1] if len(results) > 1 else None)
