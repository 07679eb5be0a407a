"""An advisory lock key as the application wrote it, read from pg_locks and
from the config."""

from __future__ import annotations

from dataclasses import dataclass

_INT32 = 1 << 32


_INT64 = 1 << 64


def _signed(value: int, bits: int) -> int:
    """Reinterpret an unsigned integer of ``bits`` width as two's complement.

    >>> _signed(0xFFFFFFFF, 32)
    -1
    >>> _signed(7, 32)
    7
    """
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >= 1 << (bits - 1) else value


@dataclass(frozen=True, slots=True, order=True)
class LockKey:
    """An advisory lock key as the application wrote it.

    ``pair`` is False for a single bigint key (``pg_advisory_lock(42)``) and True
    for a two-int4 key (``pg_advisory_lock(7, 13)``); for a bigint ``first`` is
    the whole value and ``second`` is 0.
    """

    pair: bool
    first: int
    second: int = 0

    @classmethod
    def bigint(cls, value: int) -> LockKey:
        return cls(False, value, 0)

    @classmethod
    def int_pair(cls, key1: int, key2: int) -> LockKey:
        return cls(True, key1, key2)

    @classmethod
    def from_pg_locks(cls, classid: int, objid: int, objsubid: int) -> LockKey:
        """Decode the ``pg_locks`` columns of an advisory lock.

        A bigint key is split into its high half (``classid``) and low half
        (``objid``) with ``objsubid = 1``; a pair keeps key1 in ``classid`` and key2
        in ``objid`` with ``objsubid = 2``. Both columns are unsigned oids.

        >>> LockKey.from_pg_locks(0, 42, 1).render()
        '42'
        >>> LockKey.from_pg_locks(0xFFFFFFFF, 0xFFFFFFFF, 1).render()
        '-1'
        >>> LockKey.from_pg_locks(7, 13, 2).render()
        '7,13'
        """
        if objsubid == 2:
            return cls.int_pair(_signed(classid, 32), _signed(objid, 32))
        return cls.bigint(_signed((classid % _INT32) << 32 | (objid % _INT32), 64))

    @classmethod
    def parse(cls, text: str) -> LockKey:
        """Read a key the way operators write it in config: ``42``, ``-7`` or ``7,13``.

        >>> LockKey.parse(" 7, 13 ")
        LockKey(pair=True, first=7, second=13)
        """
        parts = [p.strip() for p in str(text).split(",")]
        try:
            numbers = [int(p, 10) for p in parts]
        except ValueError:
            raise ValueError(f"not an advisory lock key: {text!r}") from None
        if len(numbers) == 1:
            if not -(1 << 63) <= numbers[0] < 1 << 63:
                raise ValueError(f"bigint key out of range: {text!r}")
            return cls.bigint(numbers[0])
        if len(numbers) == 2:
            if not all(-(1 << 31) <= n < 1 << 31 for n in numbers):
                raise ValueError(f"int4 pair key out of range: {text!r}")
            return cls.int_pair(numbers[0], numbers[1])
        raise ValueError(f"not an advisory lock key: {text!r}")

    def render(self) -> str:
        return f"{self.first},{self.second}" if self.pair else str(self.first)

    def __str__(self) -> str:
        return self.render()
