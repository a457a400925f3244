"""_async.py — awaiting a kvact completion eventfd from asyncio without a thread.

kvact's prefetch handles and copy ops each have an eventfd that becomes
readable once they are done and stays readable (kvact never reads it), so
a loop reader that fires once is all an await needs.
"""
import asyncio


async def fd_readable(fd):
    """Returns once fd is readable (at once when it already is)."""
    loop = asyncio.get_running_loop()
    done = loop.create_future()

    def ready():
        if not done.done():
            done.set_result(None)

    loop.add_reader(fd, ready)
    try:
        await done
    finally:
        loop.remove_reader(fd)


class AwaitableByFd:
    """`await x` for an object with fileno() (its completion eventfd, while it has one),
    wait() (the result, blocking) and _ptr (None once the result is in)."""

    __slots__ = ()

    def __await__(self):
        return self._wait_async().__await__()

    async def _wait_async(self):
        if self._ptr is not None:
            await fd_readable(self.fileno())
        return self.wait()
