"""Result files: atomic writes (readers see the old file or the complete new one, never a partial one)
and append-only JSON lines."""

from __future__ import annotations

import fcntl
import gzip
import json
import math
import os
import re
import secrets
import stat
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Callable, Iterable, Optional

from .errors import InputError

_FORBIDDEN_ROOTS = (Path("/proc"), Path("/sys"), Path("/dev"))


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_KINDS = ((stat.S_ISREG, "a regular file"), (stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def _kind(mode: int) -> str:
    """What a file system entry is, in words."""
    return next((word for test, word in _KINDS if test(mode)), "an unknown kind of file")


def system_root(*paths: Path) -> Optional[Path]:
    """The first of /proc, /sys, /dev that any of ``paths`` lies under (or is), else None
    (no output is written there)."""
    for p in paths:
        for root in _FORBIDDEN_ROOTS:
            if p == root or root in p.parents:
                return root
    return None


def _resolve(path: Path) -> Path:
    """``path`` absolute with every symlink followed (a chain too; a dangling link resolves to
    the file it names, which a write creates)."""
    return Path(os.path.realpath(path))


def _check_location(path: Path, target: Path, shown: str) -> None:
    """Raise InputError if ``target`` is under /proc, /sys or /dev, if its nearest existing
    ancestor is not a directory, or if that directory is not writable."""
    root = system_root(Path(os.path.abspath(path)), target)
    if root is not None:
        raise InputError(f"refusing to write under {root} (resolves to {target})", path=shown)
    for parent in target.parents:
        try:
            st = os.stat(parent)
        except (FileNotFoundError, NotADirectoryError):
            continue  # does not exist (yet) or a component above it is not a directory: go up
        except OSError as exc:
            raise InputError(f"cannot check output folder {parent} ({exc.strerror})", path=shown) from None
        if not stat.S_ISDIR(st.st_mode):
            raise InputError(f"parent {parent} is not a directory (it is {_kind(st.st_mode)})", path=shown)
        if not os.access(parent, os.W_OK | os.X_OK):
            raise InputError(f"folder {parent} is not writable", path=shown)
        return


#: the largest earlier output read whole to recognise it (beyond it, its first bytes decide)
_RECOGNISE_BYTES = 64 << 20
_PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _first_line(target: Path) -> bytes:
    with open(target, "rb") as fh:
        return fh.readline(_RECOGNISE_BYTES)


def _is_json_object(target: Path) -> bool:
    if os.stat(target).st_size > _RECOGNISE_BYTES:
        return _first_line(target).lstrip().startswith(b"{")
    try:
        return isinstance(json.loads(target.read_bytes()), dict)
    except (ValueError, RecursionError):
        return False


def _is_json_lines(target: Path) -> bool:
    line = _first_line(target)
    if not line.endswith(b"\n"):  # the first line of an append-only file, cut short by a crash
        return line.startswith(b"{") and os.stat(target).st_size == len(line)
    try:
        return isinstance(json.loads(line), dict)
    except (ValueError, RecursionError):
        return False


def _is_yaml_mapping(target: Path) -> bool:
    import yaml  # only a run's recipe.yaml is recognised this way

    try:
        return isinstance(yaml.safe_load(target.read_text(encoding="utf-8")), dict)
    except (yaml.YAMLError, UnicodeDecodeError, RecursionError, ValueError):
        return False


#: output kinds: what an existing file must be for a command to replace
#: it, in words and as a test; every hista output is one of them
KINDS: dict[str, tuple[str, Callable[[Path], bool]]] = {
    "json": ("a JSON object", _is_json_object),
    "jsonl": ("JSON lines", _is_json_lines),
    "markdown": ("markdown hista wrote (a first line '# ...')", lambda p: _first_line(p).startswith(b"# ")),
    "png": ("a PNG image", lambda p: _first_line(p)[:8] == _PNG_MAGIC or p.read_bytes()[:8] == _PNG_MAGIC),
    "yaml": ("a YAML mapping", _is_yaml_mapping),
}
_SUFFIX_KINDS = {".json": "json", ".jsonl": "jsonl", ".md": "markdown", ".png": "png", ".yaml": "yaml",
                 ".yml": "yaml"}


def output_kind(path: str | os.PathLike, kind: Optional[str] = None) -> Optional[str]:
    """The kind of output ``path`` receives: ``kind`` when given, else the one its
    suffix names (``.json``, ``.jsonl``, ``.md``, ``.png``, ``.yaml``), else None (any regular
    file may be replaced)."""
    if kind is not None and kind not in KINDS:
        raise ValueError(f"unknown output kind {kind!r}; valid: {', '.join(KINDS)}")
    return kind or _SUFFIX_KINDS.get(Path(path).suffix.lower())


def check_output_file(path: str | os.PathLike, kind: Optional[str] = None) -> Path:
    """Preflight for an output file: check that writing ``path`` can
    work and cannot damage anything, before any work is done. Raises InputError (exit 2) when
    ``path``, after following symlinks, exists and is not a regular file (a directory, FIFO,
    device or socket), when a parent component is not a directory, when it lies under /proc,
    /sys or /dev, or when the nearest existing folder is not writable; and, for an output of a
    known ``kind`` (:func:`output_kind`: given, or from the suffix), when the file exists, is
    not empty and is not of that kind (:data:`KINDS`: someone's notes named as ``--out`` are
    not replaced; an earlier output of the same kind is). A dangling symlink is fine: its target
    is created. Returns the resolved path that a write actually replaces."""
    path = Path(path)
    shown = str(path)
    target = _resolve(path)
    _check_location(path, target, shown)
    try:
        st = os.stat(target)
    except FileNotFoundError:
        return target
    except NotADirectoryError:  # cannot happen after _check_location, unless the tree changed
        raise InputError("a parent component is not a directory", path=shown) from None
    except OSError as exc:  # a symlink loop, permission denied, ...
        raise InputError(f"cannot check output file ({exc.strerror})", path=shown) from None
    if not stat.S_ISREG(st.st_mode):
        via = f" (symlink to {target})" if target != Path(os.path.abspath(path)) else ""
        raise InputError(f"output path{via} is {_kind(st.st_mode)}, not a regular file", path=shown)
    kind = output_kind(path, kind)
    if kind is not None and st.st_size > 0:
        words, test = KINDS[kind]
        try:
            ours = test(target)
        except OSError as exc:
            raise InputError(f"cannot read the file at the output path ({exc.strerror or exc})", path=shown) from None
        if not ours:
            raise InputError(f"exists and is not {words}, as this output is: hista replaces only its own earlier "
                             "outputs; move the file or choose another path", path=shown)
    return target


def check_output_dir(path: str | os.PathLike, names: Iterable[str] = ()) -> Path:
    """Preflight for an output folder such as a report folder: raises
    InputError (exit 2) when ``path``, after following symlinks, exists and is not a directory,
    lies under /proc, /sys or /dev, has a parent component that is not a directory, or cannot
    be written (it, or the nearest existing folder above it, is not writable); then checks each
    of ``names`` inside it with :func:`check_output_file`. Returns the resolved folder."""
    path = Path(path)
    shown = str(path)
    target = _resolve(path)
    root = system_root(Path(os.path.abspath(path)), target)
    if root is not None:
        raise InputError(f"refusing to write under {root} (resolves to {target})", path=shown)
    try:
        st = os.stat(target)
    except FileNotFoundError:
        _check_location(path, target, shown)
    except NotADirectoryError:
        _check_location(path, target, shown)
        raise InputError("a parent component is not a directory", path=shown) from None
    except OSError as exc:
        raise InputError(f"cannot check output folder ({exc.strerror})", path=shown) from None
    else:
        if not stat.S_ISDIR(st.st_mode):
            raise InputError(f"output folder is {_kind(st.st_mode)}, not a directory", path=shown)
        if not os.access(target, os.W_OK | os.X_OK):
            raise InputError(f"folder {target} is not writable", path=shown)
    for name in names:
        check_output_file(target / name)
    return target


def read_input(path: str | os.PathLike, what: str) -> bytes:
    """The bytes of the input file ``path`` (every file a user names is a regular file
    or refused at once): an InputError naming ``path`` when it does not exist, cannot be read,
    or is not a regular file (a directory, a FIFO, a device such as /dev/zero), checked on the
    opened file without blocking, so a FIFO never hangs the command. ``what`` says what the file
    should be (in messages)."""
    shown = str(path)
    try:
        fd = os.open(os.path.expanduser(shown), os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise InputError(f"{what} does not exist", path=shown) from None
    except IsADirectoryError:
        raise InputError(f"{what} is a directory, not a regular file", path=shown) from None
    except OSError as exc:
        raise InputError(f"cannot read the {what} ({exc.strerror or exc})", path=shown) from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise InputError(f"{what} is {_kind(mode)}, not a regular file", path=shown)
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as fh:
            fd = -1
            return fh.read()
    except OSError as exc:
        raise InputError(f"cannot read the {what} ({exc.strerror or exc})", path=shown) from None
    finally:
        if fd >= 0:
            os.close(fd)


def read_input_unzipped(path: str | os.PathLike, what: str) -> bytes:
    """:func:`read_input`'s bytes, decompressed when the name ends in ``.gz``: a truncated or
    damaged gzip stream is an InputError naming ``path``."""
    raw = read_input(path, what)
    if not str(path).endswith(".gz"):
        return raw
    try:
        return gzip.decompress(raw)
    except (OSError, EOFError, zlib.error) as exc:
        raise InputError(f"{what} is not a complete gzip file ({exc})", path=str(path)) from None


def complete_lines(raw: bytes, path: str | os.PathLike, what: str) -> bytes:
    """The complete lines of the bytes ``raw`` of an append-only JSON-lines file (§10,
    §11: case files, sweep values, per-problem files): an unterminated last line is left out
    when it can be what a crash mid-write leaves of one of its lines (it starts with ``{``);
    anything else at the end (a file that is not the command's own: notes, a one-line text) is
    an InputError naming ``path`` as not ``what``, so that it is neither resumed nor cut."""
    keep = raw.rfind(b"\n") + 1
    tail = raw[keep:]
    if tail and not tail.startswith(b"{"):
        raise InputError(f"is not a {what} (its last line is not a JSON record and has no newline): use another "
                         "path", path=str(path), line=raw[:keep].count(b"\n") + 1)
    return raw[:keep]


def read_records(path: str | os.PathLike, what: str) -> list[dict]:
    """The JSON objects, one per line, of an append-only JSON-lines file this library writes
    (a pool, a measurement): none when it does not exist; an unterminated last line a crash left
    is not one (:func:`complete_lines`). An InputError names the file and line of a line that is
    not UTF-8, not JSON or not a JSON object."""
    path = Path(path)
    if not path.exists():
        return []
    raw = complete_lines(read_input(path, what), path, what)
    try:
        lines = raw.decode("utf-8").split("\n")
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8 (byte 0x{raw[exc.start]:02x})", path=str(path),
                         line=raw[: exc.start].count(b"\n") + 1) from None
    rows = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        row = loads(line, path=str(path), line=number)
        if not isinstance(row, dict):
            raise InputError(f"line {number} is not a JSON object", path=str(path), line=number)
        rows.append(row)
    return rows


def cut_unterminated(path: str | os.PathLike) -> None:
    """Cut an unterminated last line, the trace of a crash mid-write, off an append-only
    JSON-lines file before the next append, once :func:`complete_lines` has
    accepted it and the caller has checked everything else; nothing else of the file changes.
    A file ending in a newline, or none, is left as it is."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return
    except OSError as exc:
        raise InputError(f"cannot read the file to resume it ({exc.strerror or exc})", path=str(path)) from None
    keep = len(complete_lines(raw, path, "file this command wrote"))
    if keep < len(raw):
        with open(path, "r+b") as fh:
            fh.truncate(keep)


def _identity(path: Path) -> tuple:
    """What makes two paths one file: the resolved path and, when it exists, its device and
    inode (a hard link or a bind mount is the same file under another name)."""
    target = _resolve(path)
    try:
        st = os.stat(target)
    except OSError:
        return (str(target), None)
    return (str(target), (st.st_dev, st.st_ino))


def check_not_inputs(outputs: Iterable[str | os.PathLike], inputs: Iterable[str | os.PathLike]) -> None:
    """Preflight that no output of a command is one of its inputs (a
    command never changes a byte of a file that is not its own output): raises InputError
    (exit 2) naming both paths when an output path (every file a command writes, siblings
    included) resolves to the same file as an input path, by name after following symlinks or
    by device and inode. Paths that do not exist yet only compare by name."""
    known = [(Path(p), _identity(Path(p))) for p in inputs]
    for out in outputs:
        name, inode = _identity(Path(out))
        for path, (other_name, other_inode) in known:
            if name == other_name or (inode is not None and inode == other_inode):
                raise InputError(f"this output is the input {path}: it would be overwritten; write to another "
                                 "path", path=str(out))


def _temp_pattern(name: str) -> re.Pattern[str]:
    """Names of the temporary files of writes to a file called ``name``:
    ``.{name}.{pid}.{random}.tmp`` (the random part has no dots, so the match is exact)."""
    return re.compile(r"\." + re.escape(name) + r"\.(\d+)\.[A-Za-z0-9_]+\.tmp")


def _pid_alive(pid: int) -> bool:
    if pid <= 0:
        return True  # not ours to judge: keep it
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # PermissionError: it exists and belongs to someone else
        return True
    return True


def _remove_stale_temps(target: Path) -> None:
    """Remove temporary files left beside ``target`` by writers that were killed (their pid
    is no longer alive); a live process's temporary file is never touched."""
    pattern = _temp_pattern(target.name)
    try:
        entries = list(os.scandir(target.parent))
    except OSError:
        return
    for entry in entries:
        m = pattern.fullmatch(entry.name)
        if m is None or _pid_alive(int(m.group(1))):
            continue
        try:
            if entry.is_file(follow_symlinks=False):
                os.unlink(entry.path)
        except OSError:
            pass


def _make_temp(target: Path) -> tuple[int, str]:
    prefix = f".{target.name}.{os.getpid()}."
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0)
    for _ in range(100):
        tmp = str(target.parent / f"{prefix}{secrets.token_hex(6)}.tmp")
        try:
            return os.open(tmp, flags, 0o600), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name beside {target}")


def write_atomic(path: str | os.PathLike, write: Callable[[Any], None], mode: str = "w",
                 kind: Optional[str] = None) -> Path:
    """Call ``write(fh)`` on a temporary file beside the file ``path`` names, fsync it, then
    rename it into place; on any error the temporary file is removed and the file is untouched.
    :func:`check_output_file` runs first, so a directory, FIFO,
    device, anything under /proc, /sys or /dev, or an unwritable folder is refused with an
    InputError before ``write`` is called, and only ever a regular file is replaced. A symlink
    is written through: its target is replaced, in the target's own folder, and the link stays.
    Missing parent folders are created. The temporary file is ``.{name}.{pid}.{random}.tmp``;
    ones left by a killed writer (dead pid) are removed on the next write to the same file.
    The file gets the permissions of any newly created file (0666 minus the umask), not the
    private mode of a temporary file. ``kind`` names what is written (:data:`KINDS`; default:
    from the suffix) and so what an existing file must be to be replaced. Every result file
    goes through here. Returns ``path``."""
    path = Path(path)
    target = check_output_file(path, kind)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # FileExistsError / NotADirectoryError from a file in the way, EROFS, ...
        raise InputError(f"cannot create folder {target.parent} ({exc.strerror or exc})", path=str(path)) from None
    _remove_stale_temps(target)
    fd, tmp = _make_temp(target)
    try:
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        try:  # last look: something other than a regular file may have appeared meanwhile
            st = os.lstat(target)
        except FileNotFoundError:
            pass
        else:
            if not stat.S_ISREG(st.st_mode):
                raise InputError(f"output path {target} is now {_kind(st.st_mode)}, not a regular file",
                                 path=str(path))
        os.replace(tmp, target)
    except OSError as exc:  # a full disk, a quota, an I/O error: the file is as it was
        Path(tmp).unlink(missing_ok=True)
        raise InputError(f"cannot write ({exc.strerror or exc}); the file is unchanged", path=str(path)) from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not a JSON number")


def loads(text: str, *, path: Optional[str] = None, line: Optional[int] = None) -> Any:
    """Parse one strict JSON document, raising an InputError located at ``path:line`` for bad
    JSON, NaN / Infinity literals, nesting too deep to parse, and lone surrogate escapes (such
    as ``"\\ud800"``, which no UTF-8 file can hold). Every JSON file a user names is read
    through here."""
    try:
        value = json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise InputError(f"bad JSON ({exc.msg} at column {exc.colno})", path=path, line=line) from None
    except ValueError as exc:
        raise InputError(f"bad JSON ({exc})", path=path, line=line) from None
    except RecursionError:
        raise InputError("bad JSON (nested too deeply)", path=path, line=line) from None
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise InputError("bad JSON (a string holds a lone surrogate escape such as \\ud800)", path=path,
                         line=line) from None
    except RecursionError:
        raise InputError("bad JSON (nested too deeply)", path=path, line=line) from None
    return value


def jsonable(obj: Any) -> Any:
    """``obj`` made strict-JSON ready: NaN and infinities become null, paths strings, tuples
    lists, numpy / torch scalars Python numbers, an object with a ``to_json`` method (a typed
    row) what that returns."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, Mapping):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    if callable(getattr(obj, "to_json", None)):
        return jsonable(obj.to_json())
    if hasattr(obj, "item") and callable(obj.item):
        return jsonable(obj.item())
    return obj


def dumps_line(record: Any) -> str:
    """One canonical strict-JSON line (NaN -> null, sorted keys, no spaces, newline-terminated):
    the same record always gives the same bytes."""
    return json.dumps(jsonable(record), sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False) + "\n"


def append_jsonl(path: str | os.PathLike, records: Iterable[Any]) -> None:
    """Append ``records`` as canonical JSON lines (:func:`dumps_line`) with one write and an
    fsync (:func:`append_text`), creating missing parent folders: a crash loses at most the
    lines of this call, the last of them possibly cut short (a reader of an append-only file
    drops an unterminated last line)."""
    text = "".join(dumps_line(r) for r in records)
    target = check_output_file(path, "jsonl")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"cannot create folder {target.parent} ({exc.strerror or exc})", path=str(path)) from None
    append_text(path, text, "jsonl")


def append_text(path: str | os.PathLike, text: str, kind: Optional[str] = None) -> None:
    """Append ``text`` to the file ``path`` with a single write and fsync it (SPEC §11 output
    files). Only ever a regular file is appended to: :func:`check_output_file` refuses a FIFO,
    device, directory or system path with an InputError, and the file is opened non-blocking
    and checked again with ``fstat``, so the call never hangs on a FIFO that appears in
    between. A symlink is followed. ``kind``: as for :func:`check_output_file`."""
    target = check_output_file(path, kind)
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(target, flags, 0o666)
    except OSError as exc:  # ENXIO: a FIFO without a reader appeared after the check
        raise InputError(f"cannot append ({exc.strerror})", path=str(path)) from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise InputError("output path is not a regular file", path=str(path))
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    except BaseException:
        os.close(fd)
        raise
    try:
        with os.fdopen(fd, "a", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
    except OSError as exc:  # a full disk: at most this append's last line is cut short, as a crash leaves it
        raise InputError(f"cannot append ({exc.strerror or exc})", path=str(path)) from None


def write_jsonl_atomic(path: str | os.PathLike, records: Iterable[dict]) -> Path:
    """Write ``records`` as JSON lines, atomically (an existing file is replaced only if it holds
    JSON lines)."""
    return write_atomic(path, lambda fh: fh.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in records),
                        kind="jsonl")


def write_json_atomic(path: str | os.PathLike, data: Any, indent: int = 1) -> Path:
    """Write ``data`` as indented strict JSON (NaN -> null), atomically (an existing file is
    replaced only if it holds a JSON object)."""
    text = json.dumps(jsonable(data), indent=indent, ensure_ascii=False, allow_nan=False) + "\n"
    return write_atomic(path, lambda fh: fh.write(text), kind="json")
