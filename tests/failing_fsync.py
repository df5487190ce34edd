"""Owns the failing-fsync library for tests: fsync and fdatasync fail with EIO, in the
processes started with it in LD_PRELOAD, while a flag file exists.

Built here with the system's C compiler (tests skip without one); a process reads
LD_PRELOAD when it starts, so the test's own process keeps the C library's functions while
the servers and storage writers it starts get these.
"""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

FLAG_VARIABLE = "MOTIFSTREAM_TEST_FSYNC_FAILS"

FAILING_FSYNC_C = r"""
/* fsync and fdatasync fail with EIO while the file named by MOTIFSTREAM_TEST_FSYNC_FAILS
   exists; otherwise the C library's own. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

static int failing(void) {
    const char *flag = getenv("MOTIFSTREAM_TEST_FSYNC_FAILS");
    return flag != NULL && access(flag, F_OK) == 0;
}

int fsync(int fd) {
    static int (*real)(int);
    if (failing()) { errno = EIO; return -1; }
    if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    return real(fd);
}

int fdatasync(int fd) {
    static int (*real)(int);
    if (failing()) { errno = EIO; return -1; }
    if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
    return real(fd);
}
"""


def failing_fsync_environment(directory: Path) -> tuple[dict[str, str], Path]:
    """The environment variables that give a process the library (built in `directory`),
    and the flag file that makes its fsync fail while it exists."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build the failing-fsync library")
    source, library = directory / "failing_fsync.c", directory / "failing_fsync.so"
    source.write_text(FAILING_FSYNC_C)
    subprocess.run([cc, "-shared", "-fPIC", "-O1", "-o", str(library), str(source), "-ldl"],
                   check=True, capture_output=True)
    flag = directory / "fsync-fails"
    return {"LD_PRELOAD": str(library), FLAG_VARIABLE: str(flag)}, flag
