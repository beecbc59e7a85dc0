"""Authenticated frames between the host relay and the judge: bytes on the pipes are believed only with a MAC.

Shipped as source into the judge (stdlib only). Anyone who can open the pipes (a process of the same uid,
through ``/proc/<pid>/fd``) can write bytes into them, so each frame carries an HMAC-SHA256 over its
direction, its number and its body, under a key the sandbox never sees: the host makes one per judge
process and hands it over a socket pair that it closes at once (a socket, unlike a pipe, cannot be
reopened through ``/proc``), and derives one per grading job from it and a fresh nonce. Each direction
numbers its frames from 0, so a forged, replayed, dropped or reordered frame fails to verify.
"""

from __future__ import annotations

import hashlib
import hmac

KEY_BYTES = 32
MAC_BYTES = 32
ZYGOTE, JOB = b"Z", b"J"  # the scope byte that starts each frame: the zygote's own frames, or the job's


class ChannelTampered(ValueError):
    """A frame failed authentication, came out of order, or is of a scope nobody is expecting."""


def job_key(key: bytes, nonce: bytes) -> bytes:
    """The key of one grading job: frames of one job are worthless in another."""
    return hmac.new(key, b"job:" + nonce, hashlib.sha256).digest()


class Sealer:
    """One direction of one scope: seals outgoing frames, or opens incoming ones, numbered from 0."""

    def __init__(self, key: bytes, label: bytes) -> None:
        self.key, self.label, self.count = key, label, 0

    def _mac(self, body: bytes) -> bytes:
        return hmac.digest(self.key, self.label + self.count.to_bytes(8, "big") + body, "sha256")

    def seal(self, scope: bytes, body: bytes) -> bytes:
        """``scope + mac + body`` for the next frame."""
        frame = scope + self._mac(body) + body
        self.count += 1
        return frame

    def open(self, frame: bytes) -> bytes:
        """The body of the next frame (scope byte already checked), or ChannelTampered."""
        mac, body = frame[1 : 1 + MAC_BYTES], frame[1 + MAC_BYTES :]
        if len(mac) != MAC_BYTES or not hmac.compare_digest(mac, self._mac(body)):
            raise ChannelTampered(f"frame {self.count} of {self.label.decode()} failed authentication")
        self.count += 1
        return body
