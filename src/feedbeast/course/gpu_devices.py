"""A server's GPUs as CUDA_VISIBLE_DEVICES names them: what the workshop hub shares out to learners, and what
the roster spreads its gradings over.

CUDA_VISIBLE_DEVICES takes a GPU's index or UUID, or a MIG instance's UUID ("CUDA Environment Variables", CUDA
C++ Programming Guide); a GPU split into MIG instances is used through those instances, so they are listed in its
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


def _gpus(listing: str) -> list[tuple[str, str, list[str]]]:
    """`nvidia-smi -L`'s lines as (index, UUID, the UUIDs of its MIG instances) per GPU."""
    gpus: list[tuple[str, str, list[str]]] = []
    for ln in listing.splitlines():
        uuid = ln.split("UUID:")[1].strip(" )") if "UUID:" in ln else ""
        if ln.startswith("GPU "):
            gpus.append((ln.split(":")[0].split()[1], uuid, []))
        elif "MIG" in ln and uuid and gpus:
            gpus[-1][2].append(uuid)
    return gpus


def problem(devices: list[str], option: str) -> str | None:
    """What is wrong with a list of devices for CUDA_VISIBLE_DEVICES (`option` names where it came from), or None.
    CUDA takes a GPU's index or UUID, or a MIG instance's UUID, as nvidia-smi -L prints them; a GPU's UUID may be
    shortened to a prefix that names one GPU; at the first entry it cannot match it stops, hiding the devices listed
    after it ("CUDA Environment Variables", CUDA C++ Programming Guide). A GPU in MIG mode runs work only in its
    instances (NVIDIA Multi-Instance GPU User Guide). So each entry must name one device here that can run work,
    and no device twice (its share would count twice). Indices are nvidia-smi's: the jobs get
    CUDA_DEVICE_ORDER=PCI_BUS_ID (ENV), which numbers the GPUs as nvidia-smi does."""
    if not devices:
        return (f"{option} names no GPU: give indices (0,1) or UUIDs as nvidia-smi -L prints them, or leave it "
                "out for every GPU")
    form = [d for d in devices if not (d.isdigit() or d.startswith(("GPU-", "MIG-")))]
    if form:
        return (f"{option}: {', '.join(repr(d) for d in form)} is not a GPU as CUDA_VISIBLE_DEVICES names one: "
                "give an index (0) or a UUID as nvidia-smi -L prints it (GPU-..., MIG-...)")
    twice = next((d for d in devices if devices.count(d) > 1), None)
    if twice:               # (said also where nvidia-smi lists nothing to compare with)
        return f"{option}: {twice} and {twice} are the same device: name each device once"
    gpus = _gpus(_listing())
    if not gpus:            # nvidia-smi missing or failing: nothing to compare with
        return None
    named = ", ".join(f"{i} ({u})" + "".join(f", {m} (on GPU {i})" for m in migs) for i, u, migs in gpus)
    seen: dict[str, str] = {}
    for d in devices:
        if d.startswith("MIG-"):
            hits = [(m, []) for _, _, migs in gpus for m in migs if m == d]     # a MIG UUID whole
        else:
            hits = [(u, migs) for i, u, migs in gpus if (i == d if d.isdigit() else u.startswith(d))]
        if len(hits) != 1:
            return (f"{option}: {d} names no single device here; this server's are {named} (nvidia-smi -L): with "
                    "a device CUDA cannot match, it hides that one and every device listed after it")
        uuid, migs = hits[0]
        if migs:
            return (f"{option}: {d} is a GPU in MIG mode, which runs work only in its MIG instances: name those "
                    f"({', '.join(migs)})")
        if uuid in seen:
            return f"{option}: {seen[uuid]} and {d} are the same device: name each device once"
        seen[uuid] = d
    return None


ENV = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}   # CUDA's indices as nvidia-smi's (CUDA's default: fastest first)


def devices_of(listing: str) -> list[str]:
    """`nvidia-smi -L`'s lines as devices: a GPU's index, or its MIG instances' UUIDs (listed under it) instead."""
    return [d for index, _, migs in _gpus(listing) for d in (migs or [index])]


def split(value: str) -> list[str]:
    """A CUDA_VISIBLE_DEVICES-style list ("0,1", "MIG-<uuid>,MIG-<uuid>") as its devices."""
    return [d.strip() for d in value.split(",") if d.strip()]


def unchecked(devices: list[str], option: str) -> str | None:
    """Where nvidia-smi -L lists nothing (missing, failing), `problem` has nothing to compare a named device with:
    what is said instead of a silent pass, or None where the devices were checked (or none was named)."""
    if not devices or _gpus(_listing()):
        return None
    return (f"{option}: {', '.join(devices)} not checked: nvidia-smi -L lists no device here (missing or failing), "
            "so nothing says this server has them; CUDA hides a device it cannot match and every one listed after "
            "it, and a job given such a device sees no GPU")


def in_reach() -> tuple[list[str], str]:
    """The devices a job started from here may be given, and where that list came from: CUDA_VISIBLE_DEVICES's
    own where it is set (the user chose them; empty hides every GPU), else every device nvidia-smi lists."""
    given = os.environ.get("CUDA_VISIBLE_DEVICES")
    if given is None:
        return listed(), "nvidia-smi -L"
    devices = split(given)      # CUDA stops at an index that is no device's: -1 (a common "no GPU") hides the rest
    cut = next((k for k, d in enumerate(devices) if d.startswith("-")), len(devices))
    return devices[:cut], "CUDA_VISIBLE_DEVICES"


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
