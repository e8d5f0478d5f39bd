"""What a cubin (an ELF image) says about its kernels, read without a GPU or a driver.

Chapter 00 calls its first kernel by name: the names, and the parameter layout a launch packs, are read here.

    kernel_names(cubin)                 entry functions
    kernel_params(cubin, "k")           (offset, size) of each parameter, as the launch packs them
    kernel_max_threads(cubin, "k")      the __launch_bounds__ thread limit
    initial_value(mod, "table", dtype)  what a __device__ variable holds before any kernel runs
"""
from __future__ import annotations

import struct

from .errors import FeedbeastError


def _elf_sections(cubin: bytes):
    """(name, bytes) of every section of a cubin (an ELF64 image)."""
    if cubin[:4] != b"\x7fELF":
        raise FeedbeastError("not a cubin (ELF) image")
    shoff, = struct.unpack_from("<Q", cubin, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", cubin, shoff + i * shentsize) for i in range(shnum)]
    names = sections[shstrndx]
    for sh in sections:
        start = names[4] + sh[0]
        yield cubin[start:cubin.index(b"\0", start)].decode(), sh, cubin[sh[4]:sh[4] + sh[5]]


def kernel_names(cubin: bytes) -> list[str]:
    """Entry functions (kernels) in a cubin, read from its ELF symbol table."""
    sections = [sh for _, sh, _ in _elf_sections(cubin)]
    names = []
    for sh in sections:
        if sh[1] != 2:   # SHT_SYMTAB
            continue
        strtab = sections[sh[6]]
        for off in range(sh[4], sh[4] + sh[5], sh[9]):
            st_name, st_info, st_other, _, _, _ = struct.unpack_from("<IBBHQQ", cubin, off)
            if st_info & 0xF == 2 and st_other & 0x10:   # STT_FUNC with the CUDA entry flag
                end = cubin.index(b"\0", strtab[4] + st_name)
                names.append(cubin[strtab[4] + st_name:end].decode())
    return names


# A kernel's section `.nv.info.<name>` is a list of attributes, each a format byte, an attribute byte and
# either a 2-byte value or a 2-byte length and that many bytes (`cuobjdump -elf` prints them by name).
_EIFMT_SVAL, _EIATTR_KPARAM_INFO, _EIATTR_MAX_THREADS = 0x04, 0x17, 0x05


def _nv_info(cubin: bytes, kernel: str):
    for name, _, data in _elf_sections(cubin):
        if name == f".nv.info.{kernel}":
            p = 0
            while p + 4 <= len(data):
                fmt, attr = data[p], data[p + 1]
                if fmt == _EIFMT_SVAL:
                    n, = struct.unpack_from("<H", data, p + 2)
                    yield attr, data[p + 4:p + 4 + n]
                    p += 4 + n
                else:
                    yield attr, data[p + 2:p + 4]
                    p += 4
            return
    raise FeedbeastError(f"no kernel named {kernel!r} in this cubin")


def kernel_params(cubin: bytes, kernel: str) -> list[tuple[int, int]]:
    """(offset, size) in bytes of each parameter of `kernel`, in declaration order, from the cubin
    (EIATTR_KPARAM_INFO: ordinal, offset, and the size in bits 18-31 of its last word). No driver needed."""
    params = {}
    for attr, val in _nv_info(cubin, kernel):
        if attr == _EIATTR_KPARAM_INFO and len(val) >= 12:
            _index, ordinal, offset, flags = struct.unpack_from("<IHHI", val)
            params[ordinal] = (offset, (flags >> 18) & 0x3FFF)
    return [params[i] for i in sorted(params)]


def kernel_max_threads(cubin: bytes, kernel: str) -> int | None:
    """The thread limit of `kernel`'s __launch_bounds__ (EIATTR_MAX_THREADS: x, y, z), or None."""
    for attr, val in _nv_info(cubin, kernel):
        if attr == _EIATTR_MAX_THREADS and len(val) >= 12:
            x, y, z = struct.unpack_from("<III", val)
            return x * y * z
    return None


def _symbol_data(cubin: bytes, symbol: str) -> tuple[bytes | None, int]:
    """(bytes, size) of a symbol's initial data; bytes is None for a zero-filled (NOBITS) one."""
    sections = [(sh, data) for _, sh, data in _elf_sections(cubin)]
    for sh, data in sections:
        if sh[1] != 2:   # SHT_SYMTAB
            continue
        strtab = sections[sh[6]][1]
        for off in range(0, sh[5], sh[9]):
            st_name, _, _, shndx, value, size = struct.unpack_from("<IBBHQQ", data, off)
            if strtab[st_name:strtab.index(b"\0", st_name)].decode() != symbol:
                continue
            sec, init = sections[shndx]
            return (None if sec[1] == 8 else init[value:value + size]), size   # 8: SHT_NOBITS, zeros
    raise FeedbeastError(f"no symbol {symbol!r} in this cubin (a __device__ variable must be used by a kernel "
                         "to be kept)")


def initial_value(mod, symbol: str, dtype, shape=None):
    """What the `__device__` variable `symbol` holds before any kernel runs, read from the cubin: no GPU.

    A table that a header's constexpr function fills at compile time comes out as numbers to compare with
    a model (`__device__ const Table t = make_table();`)."""
    import numpy as np
    cubin = mod.cubin if hasattr(mod, "cubin") else bytes(mod)
    data, size = _symbol_data(cubin, symbol)
    arr = np.zeros(size // np.dtype(dtype).itemsize, dtype) if data is None else np.frombuffer(data, dtype).copy()
    return arr.reshape(shape) if shape is not None else arr
