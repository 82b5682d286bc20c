"""Compact binary form of record headers, for logs that store them in one column.

Layout per header: name length (u16), name (UTF-8), value length (u32), value. Pure.
"""

from __future__ import annotations

import struct

from events.log.contract import Headers

_NAME = struct.Struct(">H")
_VALUE = struct.Struct(">I")


def pack_headers(headers: Headers) -> bytes:
    parts: list[bytes] = []
    for name, value in headers:
        encoded = name.encode()
        parts += (_NAME.pack(len(encoded)), encoded, _VALUE.pack(len(value)), value)
    return b"".join(parts)


def unpack_headers(data: bytes) -> Headers:
    out: list[tuple[str, bytes]] = []
    pos = 0
    end = len(data)
    while pos < end:
        (name_len,) = _NAME.unpack_from(data, pos)
        pos += _NAME.size
        name = data[pos : pos + name_len].decode()
        pos += name_len
        (value_len,) = _VALUE.unpack_from(data, pos)
        pos += _VALUE.size
        out.append((name, data[pos : pos + value_len]))
        pos += value_len
    return tuple(out)
