"""Crash states of a recorded command, ALICE/CrashMonkey style: what a power cut may leave on disk, not only a kill.

`record(argv, root)` runs a real command under strace(1) (following every process it starts: a local supervisor,
its attempts, their clients) and turns the system calls that touch files below `root` into an op log: folder
entries made, renamed and removed (`link`, `rename`, `unlink`: a create, a mkdir and a link(2) are each a `link`
of a new or existing inode), file data written and cut (`write`, `trunc`) and fsyncs (`sync`, of a file or of a
folder), each with the process (`cmd`) that made it. The snapshot of `root` taken before the command is the
durable starting point.

`crash_states(rec)` enumerates what the disk may hold after a power cut at each point of the log (a cut after
ops 0..k-1), under the conservative POSIX model:
- a file's data written since its last fsync may be lost: the file holds its synced bytes plus any prefix of the
  writes since (in order), or its later size filled with zeros (the size made durable, the data not);
- a folder entry made, renamed or removed since the last fsync of that folder (both folders for a rename) may be
  lost, in any order (an unsynced rename may persist while an earlier unsynced create does not);
- what an fsync covered before the cut is kept.
For each cut it yields the prefix state (everything: what a SIGKILL leaves, the page cache surviving), the durable
state (nothing unsynced), data lost but entries kept and the reverse, each unsynced entry change dropped alone and
kept alone, the in-order prefixes of the unsynced entry changes (a journaling file system's order), each file's
unsynced data lost or zeroed alone, and `extra` seeded random subsets; states are deduplicated by content.
`materialise(state, path)` writes one at `path` (the recorded root's own path: records hold absolute paths).
"""

from __future__ import annotations

import hashlib
import os
import random
import re
import shutil
import stat
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

STRACE = shutil.which("strace") or "/usr/bin/strace"
SYSCALLS = ("openat,open,creat,write,pwrite64,writev,pwritev,pwritev2,lseek,ftruncate,truncate,fsync,fdatasync,"
            "rename,renameat,renameat2,link,linkat,unlink,unlinkat,mkdir,mkdirat,rmdir,symlink,symlinkat,close,dup,"
            "dup2,dup3,fcntl,clone,clone3,fork,vfork,chdir,fchdir,execve,fchmod,fchmodat,chmod")
O_CREAT, O_EXCL, O_TRUNC, O_APPEND, O_ACCMODE = 0o100, 0o200, 0o1000, 0o2000, 0o3
AT_REMOVEDIR, AT_FDCWD = 0x200, -100
RENAME_EXCHANGE = 2
F_DUPFD, F_DUPFD_CLOEXEC = 0, 0x406


# -- the op log -------------------------------------------------------------------------------------------------------

@dataclass
class Op:
    kind: str  # link | unlink | rename | write | trunc | sync
    pid: int
    cmd: str  # the program of the process that made it (tau-attempt, python, sh ...)
    path: str  # the path it touched (a rename: its destination), relative to the root
    ino: int = -1  # link, rename: the inode named; write, trunc, sync: the inode written or synced
    dir: int = -1  # link, unlink, rename: the folder (a rename's source folder)
    name: str = ""
    dir2: int = -1  # rename: the destination folder and name
    name2: str = ""
    offset: int = 0
    data: bytes = b""
    size: int = 0


@dataclass
class Inode:
    kind: str  # "d" or "f"
    mode: int
    data: bytes = b""  # a file's bytes before the command
    children: dict = field(default_factory=dict)  # a folder's entries before the command: name -> ino


@dataclass
class Recording:
    root: str
    inodes: dict  # ino -> Inode (pre-state, plus every inode the command made, empty)
    ops: list  # [Op]
    returncode: int
    stdout: bytes
    stderr: bytes

    def cmds(self) -> set[str]:
        return {op.cmd for op in self.ops}


class Model:
    """The live namespace below the root while the log is parsed: resolves paths to inodes."""

    def __init__(self, root: str) -> None:
        self.root = os.path.abspath(root)
        self.inodes: dict[int, Inode] = {}
        self.live: dict[int, dict[str, int]] = {}  # folder ino -> its entries now
        self.snapshot()

    def snapshot(self) -> None:
        seen: dict[tuple[int, int], int] = {}

        def add(path: str) -> int:
            st = os.lstat(path)
            key = (st.st_dev, st.st_ino)
            if key in seen:
                return seen[key]
            ino = len(self.inodes)
            seen[key] = ino
            if stat.S_ISDIR(st.st_mode):
                self.inodes[ino] = Inode("d", stat.S_IMODE(st.st_mode))
                children = {name: add(os.path.join(path, name)) for name in sorted(os.listdir(path))}
                self.inodes[ino].children = children
                self.live[ino] = dict(children)
            elif stat.S_ISREG(st.st_mode):
                self.inodes[ino] = Inode("f", stat.S_IMODE(st.st_mode), Path(path).read_bytes())
            else:
                raise ValueError(f"crashstates: {path} is neither a file nor a folder")
            return ino

        add(self.root)

    def new(self, kind: str, mode: int) -> int:
        ino = len(self.inodes)
        self.inodes[ino] = Inode(kind, mode)
        if kind == "d":
            self.live[ino] = {}
        return ino

    def rel(self, path: str) -> str | None:
        """`path` relative to the root ("" for the root), or None when it is outside."""
        path = os.path.normpath(path)
        if path == self.root:
            return ""
        if path.startswith(self.root + "/"):
            return path[len(self.root) + 1:]
        return None

    def lookup(self, rel: str) -> int | None:
        ino = 0
        for part in [p for p in rel.split("/") if p]:
            entries = self.live.get(ino)
            if entries is None or part not in entries:
                return None
            ino = entries[part]
        return ino

    def parent(self, rel: str) -> tuple[int, str] | None:
        head, _, name = rel.rpartition("/")
        ino = self.lookup(head)
        return None if ino is None or ino not in self.live else (ino, name)


# -- strace's output ------------------------------------------------------------------------------------------------

_LINE = re.compile(r"^(\d+)\s+(.*)$")
_CALL = re.compile(r"^(\w+)\((.*)\) += (.*)$", re.S)
_FD = re.compile(r"^(-?\d+)(?:<(.*)>)?(\(deleted\))?$", re.S)
_HEX = re.compile(r"\\x([0-9a-f]{2})")


def _split(args: str) -> list[str]:
    """Top-level comma-separated arguments (quotes, brackets and fd annotations kept whole)."""
    out, depth, cur, quoted, i = [], 0, [], False, 0
    while i < len(args):
        c = args[i]
        if quoted:
            cur.append(c)
            if c == "\\":
                cur.append(args[i + 1])
                i += 1
            elif c == '"':
                quoted = False
        elif c == '"':
            quoted = True
            cur.append(c)
        elif c in "([{<":
            depth += 1
            cur.append(c)
        elif c in ")]}>":
            depth -= 1
            cur.append(c)
        elif c == "," and depth == 0:
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(c)
        i += 1
    if cur:
        out.append("".join(cur).strip())
    return out


def _bytes(text: str) -> bytes:
    """A string argument printed with -xx ("\\x61\\x62"); a truncated one ends with `...`."""
    m = re.match(r'^"((?:\\x[0-9a-f]{2})*)"(\.\.\.)?$', text)
    if not m:
        raise ValueError(f"crashstates: not a string argument: {text[:80]!r}")
    if m.group(2):
        raise ValueError("crashstates: strace truncated a string (raise -s)")
    return bytes(int(h, 16) for h in _HEX.findall(m.group(1)))


def _path(text: str) -> str:
    return os.fsdecode(_bytes(text))


def _fd(text: str) -> tuple[int, str | None]:
    m = _FD.match(text)
    if not m:
        raise ValueError(f"crashstates: not a descriptor: {text[:80]!r}")
    annotated = m.group(2)
    if annotated is None or m.group(3):  # a file no name reaches any more: nothing of it can be seen again
        return int(m.group(1)), None
    return int(m.group(1)), os.fsdecode(bytes(int(h, 16) for h in _HEX.findall(annotated)))


def _int(text: str) -> int:
    text = text.strip()
    if re.match(r"^0[0-7]+$", text):
        return int(text, 8)
    return int(text, 0)


def _calls(lines):
    """(pid, name, [args], return text) of every finished call, an unfinished one at its resumption."""
    pending: dict[int, str] = {}
    for line in lines:
        m = _LINE.match(line.rstrip("\n"))
        if not m:
            continue
        pid, rest = int(m.group(1)), m.group(2)
        if rest.startswith(("---", "+++")):
            continue
        if rest.endswith("<unfinished ...>"):
            pending[pid] = rest[: -len("<unfinished ...>")].rstrip()
            continue
        resumed = re.match(r"^<\.\.\. (\w+) resumed>(.*)$", rest, re.S)
        if resumed:
            start = pending.pop(pid, None)
            if start is None:
                continue
            rest = start + resumed.group(2)
        call = _CALL.match(rest)
        if call:
            yield pid, call.group(1), call.group(2), call.group(3)


# -- the recording --------------------------------------------------------------------------------------------------

class _Pos:
    __slots__ = ("ino", "pos", "append")

    def __init__(self, ino: int, pos: int, append: bool) -> None:
        self.ino, self.pos, self.append = ino, pos, append


class _Parser:
    def __init__(self, model: Model, cwd: str) -> None:
        self.m = model
        self.ops: list[Op] = []
        self.fds: dict[tuple[int, int], _Pos] = {}
        self.cwd: dict[int, str] = {}
        self.parent: dict[int, int] = {}
        self.cmd: dict[int, str] = {}
        self.default_cwd = cwd
        self.size: dict[int, int] = {i: len(n.data) for i, n in model.inodes.items() if n.kind == "f"}
        self.appended: set[int] = set()

    def cwd_of(self, pid: int) -> str:
        while pid not in self.cwd and pid in self.parent:
            pid = self.parent[pid]
        return self.cwd.get(pid, self.default_cwd)

    def cmd_of(self, pid: int) -> str:
        while pid not in self.cmd and pid in self.parent:
            pid = self.parent[pid]
        return self.cmd.get(pid, "?")

    def at(self, pid: int, dirarg: str, patharg: str) -> str:
        path = _path(patharg)
        if path.startswith("/"):
            return path
        num, base = _fd(dirarg) if dirarg is not None else (AT_FDCWD, None)
        if base is None:
            base = self.cwd_of(pid) if num == AT_FDCWD else None
        if base is None:
            raise ValueError(f"crashstates: a relative path {path!r} against an unannotated descriptor")
        return os.path.join(base, path)

    def emit(self, pid: int, kind: str, path: str, **kw) -> None:
        self.ops.append(Op(kind, pid, self.cmd_of(pid), path, **kw))

    def entry(self, pid: int, fd: int, ino: int) -> _Pos:
        pos = self.fds.get((pid, fd))
        if pos is not None and pos.ino == ino:
            return pos
        p = pid
        while p in self.parent:  # a child shares the descriptions it inherited (and their offsets)
            p = self.parent[p]
            pos = self.fds.get((p, fd))
            if pos is not None and pos.ino == ino:
                return pos
        same = [v for (q, f), v in self.fds.items() if v.ino == ino and f == fd] or \
            [v for v in self.fds.values() if v.ino == ino]
        if same:
            return same[-1]
        if ino in self.appended:
            return _Pos(ino, 0, True)
        raise ValueError(f"crashstates: a write by {pid} to descriptor {fd} of an inode never opened")

    def ino_of(self, pid: int, fdarg: str) -> tuple[int, int | None, str | None]:
        fd, path = _fd(fdarg)
        if path is None:
            return fd, None, None
        rel = self.m.rel(path)
        return fd, (None if rel is None else self.m.lookup(rel)), rel

    def write(self, pid: int, fdarg: str, data: bytes, offset: int | None) -> None:
        fd, ino, rel = self.ino_of(pid, fdarg)
        if ino is None or self.m.inodes[ino].kind != "f":
            return
        if offset is None:
            pos = self.entry(pid, fd, ino)
            offset = self.size[ino] if pos.append else pos.pos
            pos.pos = offset + len(data)
        self.size[ino] = max(self.size[ino], offset + len(data))
        self.emit(pid, "write", rel, ino=ino, offset=offset, data=data)

    def link(self, pid: int, path: str, ino: int) -> None:
        rel = self.m.rel(path)
        where = None if rel is None else self.m.parent(rel)
        if where is None:
            return
        dino, name = where
        self.m.live[dino][name] = ino
        self.emit(pid, "link", rel, ino=ino, dir=dino, name=name)

    def unlink(self, pid: int, path: str) -> None:
        rel = self.m.rel(path)
        where = None if rel is None else self.m.parent(rel)
        if where is None or where[1] not in self.m.live[where[0]]:
            return
        dino, name = where
        ino = self.m.live[dino].pop(name)
        self.emit(pid, "unlink", rel, ino=ino, dir=dino, name=name)

    def rename(self, pid: int, src: str, dst: str, flags: int = 0) -> None:
        if flags & RENAME_EXCHANGE:
            raise ValueError("crashstates: RENAME_EXCHANGE is not modelled")
        srel, drel = self.m.rel(src), self.m.rel(dst)
        if srel is None and drel is None:
            return
        if srel is None or drel is None:
            raise ValueError(f"crashstates: a rename across the root: {src} -> {dst}")
        (sdir, sname), (ddir, dname) = self.m.parent(srel), self.m.parent(drel)
        ino = self.m.live[sdir].pop(sname)
        self.m.live[ddir][dname] = ino
        self.emit(pid, "rename", drel, ino=ino, dir=sdir, name=sname, dir2=ddir, name2=dname)

    def call(self, pid: int, name: str, argtext: str, ret: str) -> None:
        if name in ("clone", "clone3", "fork", "vfork"):
            m = re.match(r"^(\d+)", ret)
            if m:
                child = int(m.group(1))
                self.parent[child] = pid
            return
        if ret.startswith("-1 ") or ret.startswith("?"):
            return
        args = _split(argtext)
        if name == "execve":
            self.cmd[pid] = os.path.basename(_path(args[0]))
            if os.path.basename(_path(args[0])).startswith("python"):
                argv = [_path(a) for a in _split(args[1][1:-1])]
                self.cmd[pid] = "supervisor" if "taulib.executors.local" in argv else os.path.basename(
                    next((a for a in argv[1:] if not a.startswith("-")), argv[0]))
        elif name == "chdir":
            self.cwd[pid] = os.path.join(self.cwd_of(pid), _path(args[0]))
        elif name == "fchdir":
            self.cwd[pid] = _fd(args[0])[1] or self.cwd_of(pid)
        elif name in ("openat", "open", "creat"):
            if name == "openat":
                path = self.at(pid, args[0], args[1])
                flags = _int(args[2])
                mode = _int(args[3]) if len(args) > 3 else 0
            elif name == "open":
                path = self.at(pid, None, args[0])
                flags, mode = _int(args[1]), (_int(args[2]) if len(args) > 2 else 0)
            else:
                path = self.at(pid, None, args[0])
                flags, mode = O_CREAT | O_TRUNC | 1, _int(args[1])
            fd, _ = _fd(ret.split()[0] if "<" not in ret else ret[: ret.rindex(">") + 1])
            rel = self.m.rel(path)
            if rel is None:
                return
            ino = self.m.lookup(rel)
            if ino is None and flags & O_CREAT:
                ino = self.m.new("f", mode & 0o777)
                self.size[ino] = 0
                self.link(pid, path, ino)
            if ino is None:
                return
            if self.m.inodes[ino].kind == "f" and flags & O_TRUNC and flags & O_ACCMODE and self.size[ino]:
                self.size[ino] = 0
                self.emit(pid, "trunc", rel, ino=ino, size=0)
            if flags & O_APPEND:
                self.appended.add(ino)
            self.fds[(pid, fd)] = _Pos(ino, 0, bool(flags & O_APPEND))
        elif name in ("dup", "dup2", "dup3") or (name == "fcntl" and _int(args[1]) in (F_DUPFD, F_DUPFD_CLOEXEC)):
            old, _ = _fd(args[0])
            new, _ = _fd(ret[: ret.index("<")] if "<" in ret else ret.split()[0])
            if (pid, old) in self.fds:
                self.fds[(pid, new)] = self.fds[(pid, old)]
        elif name == "close":
            self.fds.pop((pid, _fd(args[0])[0]), None)
        elif name == "lseek":
            fd, ino, _ = self.ino_of(pid, args[0])
            if ino is not None and self.m.inodes[ino].kind == "f":
                pos = self.entry(pid, fd, ino)
                pos.pos = int(re.match(r"^(-?\d+)", ret).group(1))
        elif name == "write":
            self.write(pid, args[0], _bytes(args[1])[: _int(ret.split()[0])], None)
        elif name == "pwrite64":
            self.write(pid, args[0], _bytes(args[1])[: _int(ret.split()[0])], _int(args[3]))
        elif name in ("writev", "pwritev", "pwritev2"):
            data = b"".join(_bytes(m.group(1)) for m in re.finditer(r'iov_base=("(?:\\x[0-9a-f]{2})*"(?:\.\.\.)?)',
                                                                    args[1]))
            data = data[: _int(ret.split()[0])]
            self.write(pid, args[0], data, None if name == "writev" else _int(args[3]))
        elif name in ("ftruncate", "truncate"):
            if name == "ftruncate":
                _, ino, rel = self.ino_of(pid, args[0])
            else:
                rel = self.m.rel(self.at(pid, None, args[0]))
                ino = None if rel is None else self.m.lookup(rel)
            if ino is not None:
                self.size[ino] = _int(args[1])
                self.emit(pid, "trunc", rel, ino=ino, size=_int(args[1]))
        elif name in ("fsync", "fdatasync"):
            _, ino, rel = self.ino_of(pid, args[0])
            if ino is not None:
                self.emit(pid, "sync", rel, ino=ino)
        elif name in ("mkdir", "mkdirat"):
            path = self.at(pid, args[0], args[1]) if name == "mkdirat" else self.at(pid, None, args[0])
            if self.m.rel(path) is not None:
                self.link(pid, path, self.m.new("d", _int(args[-1]) & 0o777))
        elif name in ("rmdir", "unlink"):
            self.unlink(pid, self.at(pid, None, args[0]))
        elif name == "unlinkat":
            self.unlink(pid, self.at(pid, args[0], args[1]))
        elif name in ("rename", "renameat", "renameat2"):
            if name == "rename":
                self.rename(pid, self.at(pid, None, args[0]), self.at(pid, None, args[1]))
            else:
                flags = _int(args[4]) if name == "renameat2" else 0
                self.rename(pid, self.at(pid, args[0], args[1]), self.at(pid, args[2], args[3]), flags)
        elif name in ("link", "linkat"):
            src, dst = ((self.at(pid, None, args[0]), self.at(pid, None, args[1])) if name == "link"
                        else (self.at(pid, args[0], args[1]), self.at(pid, args[2], args[3])))
            srel = self.m.rel(src)
            ino = None if srel is None else self.m.lookup(srel)
            if ino is not None:
                self.link(pid, dst, ino)
            elif self.m.rel(dst) is not None:
                raise ValueError(f"crashstates: a link from outside the root: {src} -> {dst}")
        elif name in ("symlink", "symlinkat"):
            if self.m.rel(self.at(pid, args[-2] if name == "symlinkat" else None, args[-1])) is not None:
                raise ValueError("crashstates: symlinks are not modelled")
        elif name in ("fchmod", "chmod", "fchmodat"):
            if name == "fchmod":
                _, ino, _ = self.ino_of(pid, args[0])
            else:
                rel = self.m.rel(self.at(pid, args[0], args[1]) if name == "fchmodat" else self.at(pid, None, args[0]))
                ino = None if rel is None else self.m.lookup(rel)
            if ino is not None:
                self.m.inodes[ino].mode = _int(args[-1] if name != "fchmodat" else args[2]) & 0o7777


def record(argv: list[str], root: str | Path, *, stdin: bytes = b"", env: dict | None = None,
           cwd: str | Path | None = None, timeout: float = 300) -> Recording:
    """Run `argv` under strace and return its op log below `root` (a folder that exists)."""
    root = os.path.abspath(root)
    model = Model(root)
    with tempfile.TemporaryDirectory(prefix="tau-strace-") as tmp:
        log = os.path.join(tmp, "trace")
        proc = subprocess.run([STRACE, "-f", "-qq", "-X", "raw", "-xx", "-y", "-s", str(1 << 24), "-e",
                               f"trace={SYSCALLS}", "-o", log, "--", *argv], input=stdin, capture_output=True,
                              env=env, cwd=cwd, timeout=timeout)
        parser = _Parser(model, os.path.abspath(cwd or os.getcwd()))
        with open(log, encoding="latin-1") as lines:
            for pid, name, args, ret in _calls(lines):
                parser.call(pid, name, args, ret)
    _final_modes(model, root)
    return Recording(root, model.inodes, parser.ops, proc.returncode, proc.stdout, proc.stderr)


def _final_modes(model: Model, root: str) -> None:
    """The modes of what still exists after the command, as the disk has them (creation modes pass the umask)."""
    def walk(ino: int, path: str) -> None:
        for name, child in model.live[ino].items() if ino in model.live else ():
            full = os.path.join(path, name)
            try:
                model.inodes[child].mode = stat.S_IMODE(os.lstat(full).st_mode)
            except FileNotFoundError:
                continue
            walk(child, full)
    walk(0, root)
    for node in model.inodes.values():
        node.mode &= ~0o022  # what was made and is gone again was made under tau's umask


# -- crash states ---------------------------------------------------------------------------------------------------

ENTRY_OPS = ("link", "unlink", "rename")
DATA_OPS = ("write", "trunc")


def _durable_at(rec: Recording, settled=None) -> list[float]:
    """For each op, the index of the fsync that makes it durable (inf when none does; its own index when
    `settled(op)` says it is kept as issued)."""
    inf = float("inf")
    out: list[float] = []
    next_sync: dict[int, float] = {}
    for i in range(len(rec.ops) - 1, -1, -1):
        op = rec.ops[i]
        if op.kind == "sync":
            out.append(inf)
            next_sync[op.ino] = i
            continue
        if settled is not None and settled(op):
            out.append(i)
        elif op.kind in DATA_OPS:
            out.append(next_sync.get(op.ino, inf))
        elif op.kind == "rename":
            out.append(max(next_sync.get(op.dir, inf), next_sync.get(op.dir2, inf)))
        else:
            out.append(next_sync.get(op.dir, inf))
    return out[::-1]


def build(rec: Recording, k: int, entries: set[int], data: dict[int, str | int]) -> dict:
    """The state after a cut before op k that kept the entry ops `entries` (indices) and, per inode, its data
    ops as `data` says: "all", "none", "zero" or the number of its unsynced data ops kept (durable ones always
    are). The state: {name: bytes | dict} with modes as {"\\0mode": mode}."""
    dur = rec._durable  # type: ignore[attr-defined]
    children = {ino: dict(node.children) for ino, node in rec.inodes.items() if node.kind == "d"}
    contents: dict[int, bytearray] = {}
    unsynced: dict[int, int] = {}
    for j in range(k):
        op = rec.ops[j]
        if op.kind in ENTRY_OPS:
            if not (dur[j] < k or j in entries):
                continue
            if op.kind == "link":
                children[op.dir][op.name] = op.ino
            elif op.kind == "unlink":
                if children[op.dir].get(op.name) == op.ino:
                    del children[op.dir][op.name]
            else:
                if children[op.dir].get(op.name) == op.ino:
                    del children[op.dir][op.name]
                children[op.dir2][op.name2] = op.ino
        elif op.kind in DATA_OPS:
            buf = contents.get(op.ino)
            if buf is None:
                buf = contents[op.ino] = bytearray(rec.inodes[op.ino].data)
            if dur[j] < k:
                keep = "all"
            else:
                choice = data.get(op.ino, "all")
                unsynced[op.ino] = n = unsynced.get(op.ino, 0) + 1
                keep = choice if isinstance(choice, str) else ("all" if n <= choice else "none")
            if keep == "none":
                continue
            if op.kind == "trunc":
                del buf[op.size:]
                buf.extend(b"\0" * (op.size - len(buf)))
                continue
            payload = op.data if keep == "all" else b"\0" * len(op.data)
            if len(buf) < op.offset:
                buf.extend(b"\0" * (op.offset - len(buf)))
            buf[op.offset: op.offset + len(payload)] = payload

    def tree(ino: int, seen: frozenset) -> dict:
        out: dict = {"\0mode": rec.inodes[ino].mode}
        for name, child in sorted(children[ino].items()):
            node = rec.inodes[child]
            if node.kind == "d":
                if child not in seen:  # a folder reached twice (only a model bug could do it) is cut
                    out[name] = tree(child, seen | {child})
            else:
                out[name] = (bytes(contents[child]) if child in contents else node.data, node.mode)
        return out

    return tree(0, frozenset({0}))


def digest(state: dict) -> str:
    h = hashlib.sha256()

    def feed(node: dict, prefix: str) -> None:
        for name in sorted(node):
            value = node[name]
            if name == "\0mode":
                h.update(f"{prefix}\0mode{value}\n".encode())
            elif isinstance(value, dict):
                feed(value, f"{prefix}{name}/")
            else:
                h.update(f"{prefix}{name}\0{value[1]}\0{len(value[0])}\0".encode() + value[0])
    feed(state, "")
    return h.hexdigest()


@dataclass
class CrashState:
    cut: int  # ops 0..cut-1 were issued
    label: str  # which choice made it (prefix, durable, ...)
    op: Op | None  # the last op issued (None: the cut before the first)
    state: dict
    key: str


def capture(root: str | Path) -> dict:
    """The state of the folder `root` as it is now (for `materialise`)."""
    model = Model(str(root))
    rec = Recording(model.root, model.inodes, [], 0, b"", b"")
    rec._durable = []  # type: ignore[attr-defined]
    return build(rec, 0, set(), {})


def prefix(rec: Recording, k: int) -> dict:
    """The state after ops 0..k-1, every one of them kept (what a SIGKILL at that point leaves)."""
    rec._durable = _durable_at(rec)  # type: ignore[attr-defined]
    return build(rec, k, set(range(k)), {})


def crash_states(rec: Recording, seed: int = 0, extra: int = 2, max_subsets: int = 4, settled=None,
                 dedupe: bool = True):
    """Every distinct crash state of the recording (see the module docstring), in cut order. `settled(op)`: an
    operation kept as issued, never lost (files no reader minds). `dedupe=False`: each cut's own distinct states,
    also those an earlier cut had."""
    rec._durable = _durable_at(rec, settled)  # type: ignore[attr-defined]
    dur = rec._durable  # type: ignore[attr-defined]
    rng = random.Random(seed)
    seen: set[str] = set()
    for k in range(len(rec.ops) + 1):
        if not dedupe:
            seen = set()
        pending_entries = [j for j in range(k) if rec.ops[j].kind in ENTRY_OPS and not dur[j] < k]
        pending_data = sorted({rec.ops[j].ino for j in range(k) if rec.ops[j].kind in DATA_OPS and not dur[j] < k})
        every = set(pending_entries)
        choices: list[tuple[str, set[int], dict]] = [("prefix", every, {})]
        if pending_entries or pending_data:
            none = {ino: "none" for ino in pending_data}
            choices += [("durable", set(), none), ("data lost", every, none), ("entries lost", set(), {})]
            for j in pending_entries:
                choices.append((f"entry {j} lost", every - {j}, {}))
                choices.append((f"only entry {j}", {j}, {}))
            for i in range(1, len(pending_entries)):
                choices.append((f"first {i} entries", set(pending_entries[:i]), {}))
            for ino in pending_data:
                choices.append((f"data of {ino} lost", every, {ino: "none"}))
                choices.append((f"data of {ino} zeroed", every, {ino: "zero"}))
                count = sum(1 for j in range(k) if rec.ops[j].kind in DATA_OPS and rec.ops[j].ino == ino
                            and not dur[j] < k)
                if count > 1:
                    choices.append((f"data of {ino} half", every, {ino: count // 2}))
            if len(pending_entries) <= max_subsets:
                for mask in range(1 << len(pending_entries)):
                    kept = {j for b, j in enumerate(pending_entries) if mask >> b & 1}
                    choices.append((f"entries {sorted(kept)}", kept, {}))
            for n in range(extra):
                kept = {j for j in pending_entries if rng.random() < 0.5}
                lost = {ino: rng.choice(("all", "none", "zero")) for ino in pending_data}
                choices.append((f"random {n}", kept, lost))
        for label, entries, data in choices:
            state = build(rec, k, entries, data)
            key = digest(state)
            if key in seen:
                continue
            seen.add(key)
            yield CrashState(k, label, rec.ops[k - 1] if k else None, state, key)


def power_cut(rec: Recording, rng: random.Random, settled=None) -> tuple[str, dict]:
    """One state a power cut after the whole log may leave: half the time only what was fsynced (LazyFS's
    choice), else a random subset of the unsynced entry changes and a random fate (kept, lost, zeroed) for each
    file's unsynced data. (label, state)."""
    rec._durable = _durable_at(rec, settled)  # type: ignore[attr-defined]
    dur, k = rec._durable, len(rec.ops)  # type: ignore[attr-defined]
    pending_entries = [j for j in range(k) if rec.ops[j].kind in ENTRY_OPS and not dur[j] < k]
    pending_data = sorted({rec.ops[j].ino for j in range(k) if rec.ops[j].kind in DATA_OPS and not dur[j] < k})
    if rng.random() < 0.5:
        return "durable", build(rec, k, set(), {ino: "none" for ino in pending_data})
    kept = {j for j in pending_entries if rng.random() < 0.5}
    fates = {ino: rng.choice(("all", "none", "zero")) for ino in pending_data}
    return f"random ({len(kept)} of {len(pending_entries)} entry changes kept)", build(rec, k, kept, fates)


def materialise(state: dict, path: str | Path, keep_root: bool = False) -> None:
    """Write `state` at `path` (removed first; with `keep_root`, only what is in it)."""
    path = Path(path)
    if keep_root:
        for child in path.iterdir():
            shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()
    elif path.exists():
        shutil.rmtree(path)

    def make(node: dict, where: Path) -> None:
        if where != path or not keep_root:
            where.mkdir(mode=0o700)
        for name, value in node.items():
            if name == "\0mode":
                continue
            if isinstance(value, dict):
                make(value, where / name)
            else:
                (where / name).write_bytes(value[0])
                os.chmod(where / name, value[1])
        os.chmod(where, node["\0mode"])

    make(state, path)
