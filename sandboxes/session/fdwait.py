"""Wait until file descriptors are ready, with poll(2): any fd number, unlike select(2).

``select.select`` refuses an fd numbered 1024 or above (FD_SETSIZE) with "filedescriptor out of range in
select()". A trainer holding dozens of pooled sandboxes (pipes, sockets and a judge per grading) opens more
descriptors than that where the fd limit allows it, and then every sandbox start and every grading raised.
Stdlib only (``select``): the session supervisor inside a sandbox uses it too.
"""

from __future__ import annotations

import select

# A hang-up or an error counts as ready, as select reports it: the read that follows sees EOF or the error, and
# an fd that is not open (POLLNVAL) makes the read or write raise EBADF instead of waiting forever.
_DONE = select.POLLHUP | select.POLLERR | select.POLLNVAL
_READ = select.POLLIN | select.POLLPRI
_WRITE = select.POLLOUT


def wait_fds(readers: list[int], writers: list[int], timeout_s: float | None) -> tuple[list[int], list[int]]:
    """``(readable, writable)`` among ``readers`` and ``writers`` once one is ready or ``timeout_s`` passed
    (None: no limit; <= 0: do not wait), the contract of ``select.select(readers, writers, [], timeout_s)[:2]``."""
    masks: dict[int, int] = {}
    for fd in readers:
        masks[fd] = masks.get(fd, 0) | _READ
    for fd in writers:
        masks[fd] = masks.get(fd, 0) | _WRITE
    poller = select.poll()
    for fd, mask in masks.items():
        poller.register(fd, mask)
    timeout_ms = None if timeout_s is None else max(0, int(timeout_s * 1000 + 0.999))  # never wake early
    events = dict(poller.poll(timeout_ms))
    readable = [fd for fd in readers if events.get(fd, 0) & (_READ | _DONE)]
    writable = [fd for fd in writers if events.get(fd, 0) & (_WRITE | _DONE)]
    return readable, writable


def readable(fd: int, timeout_s: float | None) -> bool:
    """Whether ``fd`` has data (or EOF, or an error) within ``timeout_s``."""
    return bool(wait_fds([fd], [], timeout_s)[0])


def writable(fd: int, timeout_s: float | None) -> bool:
    """Whether ``fd`` takes a write (or has failed) within ``timeout_s``."""
    return bool(wait_fds([], [fd], timeout_s)[1])
