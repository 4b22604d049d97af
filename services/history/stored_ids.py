"""Which workflow ids of a partition may have a run stored in Postgres, open or closed.

A command for a workflow id that memory does not hold needs that id's current run, which a
checkpoint stored as a row and the cache may have let go (docs/architecture.md, "The history
service"). Most such ids are new (every start of a fresh workflow id): `StoredIds` says so without
asking Postgres, which put a round trip on every new workflow's start. It is a Bloom filter that
grows as ids are added (a scalable Bloom filter: each block twice the capacity of the one before,
with half its false positive rate), so it never says no for an id stored and says yes for at most
about `FALSE_POSITIVES` of the others. It is stored with the partition's checkpoint, in the
transaction that stores the runs it holds.
"""

from __future__ import annotations

import hashlib
import math
import struct
from collections.abc import Iterator
from dataclasses import dataclass

FALSE_POSITIVES = 0.01  # in all: the blocks' rates add up to at most this
FIRST_CAPACITY = 4096  # ids the first block holds (about 5 KiB)
FORMAT = b"KCI1"  # leads the bytes: a filter of another format (another hash) is not read as this one
_HEADER = struct.Struct(">IIHI")  # per block: capacity, count, hashes, length of its bits in bytes


@dataclass
class _Block:
    capacity: int
    hashes: int
    bits: bytearray
    count: int = 0

    @classmethod
    def new(cls, capacity: int, false_positives: float) -> _Block:
        size = math.ceil(-capacity * math.log(false_positives) / math.log(2) ** 2)
        hashes = max(1, round(size / capacity * math.log(2)))
        return cls(capacity, hashes, bytearray((size + 7) // 8))

    def positions(self, digest: tuple[int, int]) -> Iterator[int]:
        size, (h1, h2) = len(self.bits) * 8, digest
        return ((h1 + i * h2) % size for i in range(self.hashes))

    def holds(self, digest: tuple[int, int]) -> bool:
        return all(self.bits[p >> 3] & (1 << (p & 7)) for p in self.positions(digest))

    def add(self, digest: tuple[int, int]) -> None:
        for p in self.positions(digest):
            self.bits[p >> 3] |= 1 << (p & 7)
        self.count += 1


def _digest(workflow_id: str) -> tuple[int, int]:
    digest = hashlib.blake2b(workflow_id.encode(), digest_size=16).digest()
    return int.from_bytes(digest[:8], "big"), int.from_bytes(digest[8:], "big") | 1


class StoredIds:
    """The workflow ids with a run stored, as a growing Bloom filter; `changed` since its bytes
    were last stored (or read)."""

    def __init__(self, blocks: list[_Block] | None = None, *, changed: bool = True) -> None:
        self._blocks = blocks or []
        self.changed = changed

    def may_hold(self, workflow_id: str) -> bool:
        """False only for an id never added."""
        digest = _digest(workflow_id)
        return any(block.holds(digest) for block in self._blocks)

    def add(self, workflow_id: str) -> None:
        digest = _digest(workflow_id)
        if any(block.holds(digest) for block in self._blocks):
            return
        if not self._blocks or self._blocks[-1].count >= self._blocks[-1].capacity:
            # Block i has rate FALSE_POSITIVES / 2**(i+1): they add up to less than FALSE_POSITIVES.
            index = len(self._blocks)
            self._blocks.append(_Block.new(FIRST_CAPACITY << index, FALSE_POSITIVES / 2 ** (index + 1)))
        self._blocks[-1].add(digest)
        self.changed = True

    def __len__(self) -> int:
        return sum(block.count for block in self._blocks)

    def to_bytes(self) -> bytes:
        return FORMAT + b"".join(_HEADER.pack(b.capacity, b.count, b.hashes, len(b.bits)) + bytes(b.bits) for b in self._blocks)

    @classmethod
    def from_bytes(cls, data: bytes) -> StoredIds:
        if not data.startswith(FORMAT):
            raise ValueError(f"not a closed-ids filter of format {FORMAT!r}: it begins {data[:len(FORMAT)]!r}")
        blocks, at = [], len(FORMAT)
        while at < len(data):
            capacity, count, hashes, size = _HEADER.unpack_from(data, at)
            at += _HEADER.size
            blocks.append(_Block(capacity, hashes, bytearray(data[at:at + size]), count))
            at += size
        if at != len(data):
            raise ValueError(f"a closed-ids filter of {len(data)} bytes ends inside a block")
        return cls(blocks, changed=False)
