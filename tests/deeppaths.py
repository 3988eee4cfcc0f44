"""Paths near PATH_MAX, made and read through directory descriptors one
component at a time (an absolute path string of them would be too long)."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

PATH_MAX = 4096  # with its NUL: a path holds at most 4095 bytes
NAME_MAX = 255


def deep_dirs(total: int, *, comp: str = "d" * 200) -> list[str]:
    """Directory components whose joined path (with its slashes) is at most
    ``total`` bytes, each ``comp`` but a shorter last one to come close."""
    parts: list[str] = []
    used = 0
    while used + len(comp) + (1 if parts else 0) <= total:
        used += len(comp) + (1 if parts else 0)
        parts.append(comp)
    rest = total - used - 1
    if rest >= 1:
        parts.append(comp[0] * min(rest, NAME_MAX))
    return parts


def long_root(base: Path, length: int) -> Path:
    """A directory below ``base`` whose own path is about ``length`` bytes
    (SRC's own path moves where a joined path gets too long)."""
    path = base
    while len(os.fsencode(str(path))) + 200 < length:
        path = path / ("s" * 199)
    fill = length - len(os.fsencode(str(path))) - 1
    if fill > 0:
        path = path / ("t" * min(fill, NAME_MAX))
    path.mkdir(parents=True, exist_ok=True)
    return path


@contextmanager
def opened(root: Path | int, rel: str = "", flags: int = os.O_RDONLY) -> Iterator[int]:
    """A descriptor of ``rel`` below ``root`` (a path or a directory fd),
    walked one component at a time without following symlinks."""
    fd = os.open(root, os.O_PATH | os.O_DIRECTORY) if isinstance(root, Path) else os.dup(root)
    try:
        parts = [p for p in rel.split("/") if p]
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            nxt = os.open(
                part,
                (flags if last else os.O_PATH | os.O_DIRECTORY) | os.O_NOFOLLOW | os.O_CLOEXEC,
                dir_fd=fd,
            )
            os.close(fd)
            fd = nxt
        if not parts and flags != os.O_PATH:
            nxt = os.open(".", flags | os.O_CLOEXEC, dir_fd=fd)
            os.close(fd)
            fd = nxt
        yield fd
    finally:
        os.close(fd)


def split(rel: str) -> tuple[str, str]:
    head, _, tail = rel.rpartition("/")
    return head, tail


def makedirs(root: Path, parts: list[str]) -> str:
    """Make ``parts`` as nested directories below ``root`` (existing ones
    kept); returns their joined relative path."""
    for i in range(len(parts)):
        with (
            opened(root, "/".join(parts[:i]), os.O_PATH | os.O_DIRECTORY) as fd,
            suppress(FileExistsError),
        ):
            os.mkdir(parts[i], 0o755, dir_fd=fd)
    return "/".join(parts)


def write(root: Path, rel: str, data: bytes) -> None:
    parent, name = split(rel)
    with opened(root, parent, os.O_PATH | os.O_DIRECTORY) as pfd:
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644, dir_fd=pfd)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)


def read(root: Path, rel: str) -> bytes:
    with opened(root, rel) as fd:
        out = b""
        while chunk := os.read(fd, 1 << 16):
            out += chunk
        return out


def lstat(root: Path, rel: str) -> os.stat_result:
    parent, name = split(rel)
    with opened(root, parent, os.O_PATH | os.O_DIRECTORY) as pfd:
        return os.stat(name, dir_fd=pfd, follow_symlinks=False)


def exists(root: Path, rel: str) -> bool:
    try:
        lstat(root, rel)
    except FileNotFoundError:
        return False
    return True


def listdir(root: Path, rel: str) -> list[str]:
    with opened(root, rel, os.O_RDONLY | os.O_DIRECTORY) as fd:
        return sorted(os.listdir(fd))


def tree(root: Path, skip: frozenset[str] = frozenset()) -> dict[str, bytes | str]:
    """rel -> bytes of each file, 'dir' / 'symlink:<target>' of the rest,
    below ``root`` at any depth (``skip``: top-level names left out)."""
    out: dict[str, bytes | str] = {}
    stack = [""]
    while stack:
        rel_dir = stack.pop()
        for name in listdir(root, rel_dir):
            if not rel_dir and name in skip:
                continue
            rel = f"{rel_dir}/{name}" if rel_dir else name
            st = lstat(root, rel)
            if stat.S_ISDIR(st.st_mode):
                out[rel] = "dir"
                stack.append(rel)
            elif stat.S_ISLNK(st.st_mode):
                parent, leaf = split(rel)
                with opened(root, parent, os.O_PATH | os.O_DIRECTORY) as pfd:
                    out[rel] = "symlink:" + os.readlink(leaf, dir_fd=pfd)
            else:
                out[rel] = read(root, rel)
    return out
