"""Reading and writing MNIST's IDX files (optionally gzipped), with clear errors.

IDX layout: two zero bytes, a type code (0x08 = uint8), the number of
dimensions, then each dimension as a big-endian uint32, then the data.
"""

from __future__ import annotations

import gzip
import os
import struct
import zlib

import numpy as np

from ps_toolkit.base.errors import ConfigError

_UINT8 = 0x08


def read_idx(path: str, expected_ndim: int | None = None) -> np.ndarray:
    """Reads an IDX file (gzipped when it ends in .gz) into a uint8 array."""
    raw = _read_bytes(path)
    if len(raw) < 4:
        raise ConfigError(f"IDX file {path} is truncated: {len(raw)} bytes, no header")
    zero, dtype_code, ndim = struct.unpack(">HBB", raw[:4])
    if zero != 0 or dtype_code != _UINT8 or (expected_ndim is not None and ndim != expected_ndim):
        want = f"0x0000{_UINT8:02x}{expected_ndim:02x}" if expected_ndim else "0x000008NN"
        raise ConfigError(f"IDX file {path} has magic number 0x{raw[:4].hex()}, expected {want} (uint8 IDX)")
    header_end = 4 + 4 * ndim
    if len(raw) < header_end:
        raise ConfigError(f"IDX file {path} is truncated inside its header")
    shape = struct.unpack(f">{ndim}I", raw[4:header_end])
    expected_bytes = int(np.prod(shape, dtype=np.int64))
    found = len(raw) - header_end
    if found != expected_bytes:
        raise ConfigError(
            f"IDX file {path} is truncated or padded: header says shape {shape} "
            f"({expected_bytes} bytes), found {found} bytes"
        )
    return np.frombuffer(raw, dtype=np.uint8, offset=header_end).reshape(shape)


def write_idx_gz(path: str, array: np.ndarray) -> None:
    """Writes a uint8 array as a gzipped IDX file. mtime=0 keeps the bytes reproducible."""
    array = np.ascontiguousarray(array, dtype=np.uint8)
    header = struct.pack(">HBB", 0, _UINT8, array.ndim) + struct.pack(f">{array.ndim}I", *array.shape)
    with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as handle:
        handle.write(header + array.tobytes())


def _read_bytes(path: str) -> bytes:
    if not os.path.isfile(path):
        raise ConfigError(f"IDX file {path} does not exist")
    try:
        if path.endswith(".gz"):
            with gzip.open(path, "rb") as handle:
                return handle.read()
        with open(path, "rb") as handle:
            return handle.read()
    except (OSError, EOFError, zlib.error) as err:
        raise ConfigError(f"IDX file {path} is not a readable gzip file: {err}") from None
