"""taulib.fs.writeback's choice of direct I/O: turned on only for a file on a local block file system (here the test
folder's ext4), never elsewhere (tmpfs, a FUSE file system), and writes through it land byte for byte."""

from __future__ import annotations

import errno
import fcntl
import mmap
import os
from pathlib import Path

import pytest

from taulib.fs import writeback


def o_direct(fd: int) -> bool:
    return bool(fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_DIRECT)


def new_file(folder: Path) -> int:
    return os.open(folder / "f.bin", os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)


def test_the_file_system_of_a_device_is_read_from_mountinfo(tmp_path):
    assert writeback.fstype(os.stat("/proc").st_dev) == "proc"
    assert writeback.fstype(os.stat(tmp_path).st_dev) in writeback.DIRECT_TYPES | {"tmpfs", "overlay"}
    assert writeback.fstype(os.makedev(4095, 4095)) is None  # no such mount


def test_direct_io_is_turned_on_for_a_file_on_a_local_block_file_system_and_writes_land_byte_for_byte(tmp_path):
    if writeback.fstype(os.stat(tmp_path).st_dev) not in writeback.DIRECT_TYPES:
        pytest.skip("the test folder is not on a local block file system")
    fd = new_file(tmp_path)
    try:
        assert not o_direct(fd)
        assert writeback.start_direct_io(fd) is True
        assert o_direct(fd)
        buffer = mmap.mmap(-1, 3 * writeback.ALIGN)
        buffer[:] = bytes(range(256)) * (3 * writeback.ALIGN // 256)
        writeback.write_direct(fd, memoryview(buffer)[writeback.ALIGN:], writeback.ALIGN, 2 * writeback.ALIGN)
        writeback.write_direct(fd, memoryview(buffer)[:writeback.ALIGN], 0, writeback.ALIGN)
        assert o_direct(fd)
    finally:
        os.close(fd)
    assert (tmp_path / "f.bin").read_bytes() == bytes(buffer)


def test_a_direct_write_the_file_system_refuses_goes_through_the_page_cache_without_its_padding(tmp_path):
    if writeback.fstype(os.stat(tmp_path).st_dev) not in writeback.DIRECT_TYPES:
        pytest.skip("the test folder is not on a local block file system")
    fd = new_file(tmp_path)
    try:
        assert writeback.start_direct_io(fd) is True
        buffer = mmap.mmap(-1, 3 * writeback.ALIGN)
        buffer[:] = bytes(range(251)) * (3 * writeback.ALIGN // 251) + bytes(3 * writeback.ALIGN % 251)
        # a view whose address is not aligned: what direct I/O refuses (EINVAL), as a file system wanting a larger
        # alignment would; its last 1000 bytes stand for the padding of a blob's last block
        view = memoryview(buffer)[1:1 + 2 * writeback.ALIGN]
        writeback.write_direct(fd, view, 0, 2 * writeback.ALIGN - 1000)
        assert not o_direct(fd)
        with pytest.raises(OSError) as refused:  # a write the page cache refuses too is the caller's error
            writeback.write_direct(fd, memoryview(buffer)[:10], -1, 10)
        assert refused.value.errno == errno.EINVAL
    finally:
        os.close(fd)
    assert (tmp_path / "f.bin").read_bytes() == bytes(buffer)[1:1 + 2 * writeback.ALIGN - 1000]


def test_a_file_on_tmpfs_keeps_the_page_cache():
    if not os.path.isdir("/dev/shm") or writeback.fstype(os.stat("/dev/shm").st_dev) != "tmpfs":
        pytest.skip("no tmpfs at /dev/shm")
    folder = Path("/dev/shm") / f"tau-test-{os.getpid()}"
    folder.mkdir(mode=0o700)
    try:
        fd = new_file(folder)
        try:
            assert writeback.start_direct_io(fd) is False
            assert not o_direct(fd)
        finally:
            os.close(fd)
    finally:
        (folder / "f.bin").unlink()
        folder.rmdir()


@pytest.mark.root
def test_a_file_on_a_fuse_file_system_keeps_the_page_cache(nolink_workspace):
    fd = new_file(nolink_workspace)
    try:
        assert writeback.fstype(os.fstat(fd).st_dev).startswith("fuse")
        assert writeback.start_direct_io(fd) is False
        assert not o_direct(fd)
    finally:
        os.close(fd)
