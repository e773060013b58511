"""Opening a path beneath a directory descriptor without races: nothing an agent renames or swaps
for a symlink, at any moment, makes us open something outside the workspace.

Checking a path and then opening it by name is a race (the agent can swap a directory for a
symlink in between), so every open here starts from the workspace's directory descriptor and
lets nothing but our own rules resolve the components:

- Where the kernel has `openat2(2)` (Linux 5.6), it resolves the path with `RESOLVE_BENEATH`
  (no `..` above the start, no absolute symlink, no symlink leading out) and
  `RESOLVE_NO_MAGICLINKS` (no `/proc/<pid>/fd/N`-style jumps), atomically.
- Elsewhere (`ENOSYS`, or a seccomp filter that answers `EPERM`), the same rules by hand: one
  component at a time from the descriptor of the one before, each opened with `O_NOFOLLOW`; a
  symlink met on the way is read (`readlinkat`) and its relative target walked the same way, `..`
  steps back along the descriptors we hold (never above the workspace), an absolute target is
  refused, as `RESOLVE_BENEATH` does.

So both agree on symlinks: one inside the workspace whose relative target stays inside is
followed; an absolute one, or one leading out, is refused with `EXDEV` (more than 40 in one path:
`ELOOP`). Errors are plain `OSError`s; callers word them."""

from __future__ import annotations

import ctypes
import enum
import errno
import os
import stat
from collections.abc import Sequence

__all__ = [
    "Resolution",
    "open_beneath",
    "open_dir_beneath",
    "openat2_available",
]

_SYS_OPENAT2 = 437  # the same number on every architecture Linux numbers jointly (x86_64, arm64)
_RESOLVE_NO_MAGICLINKS = 0x02
_RESOLVE_BENEATH = 0x08
_RESOLVE = _RESOLVE_BENEATH | _RESOLVE_NO_MAGICLINKS
_MAX_LINKS = 40  # the kernel's own bound on symlinks in one resolution
_RACE_RETRIES = 20  # openat2 answers EAGAIN when a rename raced its resolution
_DIR_FLAGS = os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC


class Resolution(enum.Enum):
    """How paths are resolved: `AUTO` is openat2 where the kernel has it, else the walk; the two
    others force one way (tests exercise both)."""

    AUTO = "auto"
    OPENAT2 = "openat2"
    WALK = "walk"


class _OpenHow(ctypes.Structure):
    _fields_ = (
        ("flags", ctypes.c_uint64),
        ("mode", ctypes.c_uint64),
        ("resolve", ctypes.c_uint64),
    )


_libc = ctypes.CDLL(None, use_errno=True)
_syscall = _libc.syscall
_syscall.restype = ctypes.c_long
_available: bool | None = None


def _openat2(dir_fd: int, path: str, flags: int) -> int:
    how = _OpenHow(flags, 0, _RESOLVE)  # never O_CREAT here: files are made by name in a dir fd
    encoded = os.fsencode(path)
    for _ in range(_RACE_RETRIES):
        fd = _syscall(
            ctypes.c_long(_SYS_OPENAT2),
            ctypes.c_int(dir_fd),
            ctypes.c_char_p(encoded),
            ctypes.byref(how),
            ctypes.c_size_t(ctypes.sizeof(how)),
        )
        if fd >= 0:
            return int(fd)
        code = ctypes.get_errno()
        if code != errno.EAGAIN:
            raise OSError(code, os.strerror(code), path)
    raise OSError(errno.EAGAIN, os.strerror(errno.EAGAIN), path)


def openat2_available() -> bool:
    """Whether this kernel (and any seccomp filter around us) lets us call openat2; asked once."""
    global _available
    if _available is None:
        root = os.open("/", _DIR_FLAGS)
        try:
            os.close(_openat2(root, ".", _DIR_FLAGS))
            _available = True
        except OSError as exc:
            if exc.errno not in (errno.ENOSYS, errno.EPERM):
                raise
            _available = False
        finally:
            os.close(root)
    return _available


def _use_openat2(how: Resolution) -> bool:
    if how is Resolution.OPENAT2:
        if not openat2_available():
            raise OSError(errno.ENOSYS, "openat2 is not available on this kernel")
        return True
    return how is Resolution.AUTO and openat2_available()


def open_beneath(
    root_fd: int, parts: Sequence[str], flags: int, *, how: Resolution = Resolution.AUTO
) -> int:
    """A descriptor for `parts` (path components, `..` allowed) beneath `root_fd`, opened with
    `flags` (no `O_CREAT`); the last component is followed only as the rules above allow."""
    if _use_openat2(how):
        return _openat2(root_fd, "/".join(parts) or ".", flags | os.O_CLOEXEC)
    return _walk(root_fd, parts, flags | os.O_CLOEXEC, create_dirs=False)


def open_dir_beneath(
    root_fd: int, parts: Sequence[str], *, create: bool, how: Resolution = Resolution.AUTO
) -> int:
    """An `O_PATH` descriptor for the directory `parts` beneath `root_fd`, each missing one made
    (0777 less the umask) when `create`; usable as `dir_fd` for opens, mkdir and rename."""
    if not _use_openat2(how):
        return _walk(root_fd, parts, _DIR_FLAGS, create_dirs=create)
    try:
        return _openat2(root_fd, "/".join(parts) or ".", _DIR_FLAGS)
    except FileNotFoundError:
        if not create:
            raise
    # Made one level at a time, each in a parent opened beneath the root just now.
    for depth in range(1, len(parts) + 1):
        try:
            os.close(_openat2(root_fd, "/".join(parts[:depth]), _DIR_FLAGS))
            continue
        except FileNotFoundError:
            pass
        parent = _openat2(root_fd, "/".join(parts[: depth - 1]) or ".", _DIR_FLAGS)
        try:
            os.mkdir(parts[depth - 1], dir_fd=parent)
        except FileExistsError:
            pass  # made meanwhile by someone else: opened (and checked) next
        finally:
            os.close(parent)
    return _openat2(root_fd, "/".join(parts) or ".", _DIR_FLAGS)


def _walk(root_fd: int, parts: Sequence[str], flags: int, *, create_dirs: bool) -> int:
    """The rules of RESOLVE_BENEATH by hand: `held` are the directories walked so far, the root
    first; `todo` is what remains, last component first."""
    held = [os.dup(root_fd)]
    todo = [part for part in reversed(parts) if part not in ("", ".")]
    links = races = 0
    try:
        while todo:
            part = todo.pop()
            if part == "..":
                if len(held) == 1:
                    raise OSError(errno.EXDEV, "the path leads outside", part)
                os.close(held.pop())
                continue
            last = not todo
            try:
                fd = _open_component(held[-1], part, flags if last else _DIR_FLAGS, create_dirs)
            except OSError as exc:
                target = _link_target(held[-1], part, exc)
                if target is None:  # a directory again by now: the same component once more
                    races += 1
                    if races > _RACE_RETRIES:
                        raise OSError(errno.EAGAIN, "it kept changing", part) from None
                    todo.append(part)
                    continue
                links += 1
                if links > _MAX_LINKS:
                    raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), part) from None
                if target.startswith("/"):
                    raise OSError(errno.EXDEV, "an absolute symlink", part) from None
                todo.extend(p for p in reversed(target.split("/")) if p not in ("", "."))
                continue
            if last:
                return fd
            held.append(fd)
        return os.open(".", flags, dir_fd=held[-1])
    finally:
        for fd in held:
            os.close(fd)


def _open_component(dir_fd: int, part: str, flags: int, create_dir: bool) -> int:
    try:
        return os.open(part, flags | os.O_NOFOLLOW, dir_fd=dir_fd)
    except FileNotFoundError:
        if not (create_dir and flags & os.O_DIRECTORY):
            raise
    try:
        os.mkdir(part, dir_fd=dir_fd)
    except FileExistsError:
        pass  # made meanwhile: opened (and checked) now, as anything else is
    return os.open(part, flags | os.O_NOFOLLOW, dir_fd=dir_fd)


def _link_target(dir_fd: int, part: str, failure: OSError) -> str | None:
    """The target of `part` when `failure` came from its being a symlink (O_NOFOLLOW reports
    one as ELOOP, or ENOTDIR with O_DIRECTORY); None when it is a directory again by now (it was
    swapped meanwhile); else `failure` itself is raised."""
    if failure.errno not in (errno.ELOOP, errno.ENOTDIR):
        raise failure
    try:
        mode = os.stat(part, dir_fd=dir_fd, follow_symlinks=False).st_mode
        if stat.S_ISDIR(mode) and failure.errno == errno.ENOTDIR:
            return None
        if stat.S_ISLNK(mode):
            return os.readlink(part, dir_fd=dir_fd)
    except OSError:
        return None  # gone or swapped between the stat and the readlink: look again
    raise failure
