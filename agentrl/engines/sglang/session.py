"""SGLang's weight-update session: ``/begin_weight_update`` ... ``/end_weight_update``.

SGLang 0.5.23 refuses ``/update_weights_from_tensor`` (and ``/update_weights_from_distributed``) outside such a
session with HTTP 400, "must run between begin_weight_update() and end_weight_update()"
(``srt/managers/scheduler_components/weight_updater.py``); ``/update_weights_from_disk`` needs none. Older
servers have no session routes (404) and load tensors without one. A session left open by a trainer that died
inside it makes the next ``begin`` fail with "already open": it is closed and opened again, so a resumed run
can sync.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from agentrl.engines.http_base import HttpTransport, error_text
from agentrl.errors import EngineError

BEGIN, END = "/begin_weight_update", "/end_weight_update"


@asynccontextmanager
async def weight_update_session(http: HttpTransport, workers: list[str], timeout_s: float) -> AsyncIterator[None]:
    """Open a session on every worker that has them, yield, close them all (also when the body raised)."""
    opened = await asyncio.gather(*(_begin(http, url, timeout_s) for url in workers), return_exceptions=True)
    failed = [o for o in opened if isinstance(o, BaseException)]
    with_session = [url for url, o in zip(workers, opened) if o is True]
    if failed:
        await asyncio.gather(*(_end(http, url, timeout_s) for url in with_session), return_exceptions=True)
        raise failed[0]
    try:
        yield
    finally:
        await asyncio.gather(*(_end(http, url, timeout_s) for url in with_session))


async def _begin(http: HttpTransport, url: str, timeout_s: float) -> bool:
    """True when a session was opened; False on a server without sessions (404: SGLang before them)."""
    status, reply = await http.call("POST", url, BEGIN, {}, timeout_s)
    if status == 404:
        return False
    if status == 400 and "already open" in error_text(reply):
        await _end(http, url, timeout_s)  # left open by a trainer that died inside it
        status, reply = await http.call("POST", url, BEGIN, {}, timeout_s)
    if status != 200 or not (isinstance(reply, dict) and reply.get("success")):
        raise EngineError(
            f"SGLang server {url}{BEGIN} failed (HTTP {status}): {error_text(reply)}; weights cannot be sent as "
            "tensors; use engine.weight_transfer: disk or restart the server"
        )
    return True


async def _end(http: HttpTransport, url: str, timeout_s: float) -> None:
    status, reply = await http.call("POST", url, END, {}, timeout_s)
    if status != 200 or not (isinstance(reply, dict) and reply.get("success")):
        raise EngineError(
            f"SGLang server {url}{END} failed (HTTP {status}): {error_text(reply)}; the server may still hold the "
            "old weights; restart it and resume the run"
        )
