"""A server's GPUs as CUDA_VISIBLE_DEVICES names them: what the workshop hub shares out to learners, and what
the roster spreads its gradings over.

CUDA_VISIBLE_DEVICES takes a GPU's index or a MIG instance's UUID ("CUDA Environment Variables", CUDA C++
Programming Guide); a GPU split into MIG instances is used through those instances, so they are listed in its
place ("Device Enumeration", NVIDIA Multi-Instance GPU User Guide).
"""
from __future__ import annotations

import contextlib
import os
import queue
import subprocess


def _listing() -> str:
    """`nvidia-smi -L`'s output; empty where nvidia-smi is missing or fails."""
    try:
        return subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def listed() -> list[str]:
    """The devices `nvidia-smi -L` lists (each GPU's MIG instances, or the GPU itself where it has none); none
    where nvidia-smi is missing or fails."""
    return devices_of(_listing())


def problem(devices: list[str], option: str) -> str | None:
    """What is wrong with a list of devices for CUDA_VISIBLE_DEVICES (`option` names where it came from), or None.
    CUDA takes a GPU's index or its UUID as nvidia-smi -L prints it (GPU-... or MIG-...), a UUID shortened to any
    prefix that names one device; at the first entry it cannot match, it stops, hiding the devices listed after
    it ("CUDA Environment Variables", CUDA C++ Programming Guide). So each entry must name one device here."""
    if not devices:
        return (f"{option} names no GPU: give indices (0,1) or UUIDs as nvidia-smi -L prints them, or leave it "
                "out for every GPU")
    form = [d for d in devices if not (d.isdigit() or d.startswith(("GPU-", "MIG-")))]
    if form:
        return (f"{option}: {', '.join(repr(d) for d in form)} is not a GPU as CUDA_VISIBLE_DEVICES names one: "
                "give an index (0) or a UUID as nvidia-smi -L prints it (GPU-..., MIG-...)")
    lines = _listing().splitlines()
    indices = [ln.split(":")[0].split()[1] for ln in lines if ln.startswith("GPU ")]
    uuids = [ln.split("UUID:")[1].strip(" )") for ln in lines if "UUID:" in ln]
    if not indices:         # nvidia-smi missing or failing: nothing to compare with
        return None
    wrong = [d for d in devices if (d not in indices if d.isdigit() else sum(u.startswith(d) for u in uuids) != 1)]
    if not wrong:
        return None
    named, gpu = [], ""     # each GPU as its index and UUID, each MIG instance as its UUID and its GPU's index
    for ln in lines:
        uuid = ln.split("UUID:")[1].strip(" )") if "UUID:" in ln else "?"
        if ln.startswith("GPU "):
            gpu = ln.split(":")[0].split()[1]
            named.append(f"{gpu} ({uuid})")
        elif "MIG" in ln and "UUID:" in ln:
            named.append(f"{uuid} (on GPU {gpu})")
    return (f"{option}: {', '.join(wrong)} names no single device here; this server's are "
            f"{', '.join(named)} (nvidia-smi -L): with a device CUDA cannot match, it hides that "
            "one and every device listed after it")


def devices_of(listing: str) -> list[str]:
    """`nvidia-smi -L`'s lines as devices: a GPU's index, or its MIG instances' UUIDs (listed under it) instead."""
    gpus: list[tuple[str, list[str]]] = []
    for ln in listing.splitlines():
        if ln.startswith("GPU "):
            gpus.append((ln.split(":")[0].split()[1], []))
        elif "MIG" in ln and "UUID:" in ln and gpus:
            gpus[-1][1].append(ln.split("UUID:")[1].strip(" )"))
    return [d for index, migs in gpus for d in (migs or [index])]


def split(value: str) -> list[str]:
    """A CUDA_VISIBLE_DEVICES-style list ("0,1", "MIG-<uuid>,MIG-<uuid>") as its devices."""
    return [d.strip() for d in value.split(",") if d.strip()]


def in_reach() -> tuple[list[str], str]:
    """The devices a job started from here may be given, and where that list came from: CUDA_VISIBLE_DEVICES's
    own where it is set (the user chose them; empty hides every GPU), else every device nvidia-smi lists."""
    given = os.environ.get("CUDA_VISIBLE_DEVICES")
    return (split(given), "CUDA_VISIBLE_DEVICES") if given is not None else (listed(), "nvidia-smi -L")


class Slots:
    """`jobs` concurrent jobs spread over `devices`: slot i runs on devices[i % len(devices)], so with 4 jobs on
    2 GPUs each GPU runs 2. A job takes a free slot for its run (`with slots.one() as device`), None where there
    is no device (the job's environment then stays as it is)."""

    def __init__(self, devices: list[str], jobs: int):
        self.devices = list(devices)
        self._free: queue.Queue = queue.Queue()
        for i in range(max(1, jobs)):
            self._free.put(self.devices[i % len(self.devices)] if self.devices else None)

    @contextlib.contextmanager
    def one(self):
        device = self._free.get()
        try:
            yield device
        finally:
            self._free.put(device)

    def used(self, jobs: int) -> list[str]:
        """The devices that `jobs` concurrent jobs run on."""
        return self.devices[:max(1, jobs)] if self.devices else []
