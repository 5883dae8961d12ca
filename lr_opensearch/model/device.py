"""The torch device a user names (``--device``), checked before any work starts."""

from __future__ import annotations

import torch

from lr_opensearch.errors import ConfigError


def check_device(name: str | torch.device) -> torch.device:
    """``name`` as a ``torch.device`` that exists on this machine.

    Raises:
        ConfigError: not a device name, or no such device here (with the ones there are).
    """
    try:
        device = torch.device(name)
    except (RuntimeError, TypeError, ValueError):
        raise ConfigError(f"--device {name!r} is not a torch device name; use cpu, cuda or "
                          f"cuda:N (here: {available_devices()})") from None
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise ConfigError(f"--device {name}: this machine has no usable CUDA GPU; use "
                              "--device cpu")
        if device.index is not None and device.index >= count:
            raise ConfigError(f"--device {name}: this machine has {count} CUDA GPU(s), "
                              f"cuda:0 to cuda:{count - 1}")
    elif device.type == "mps" and not torch.backends.mps.is_available():
        raise ConfigError(f"--device {name}: MPS is not available here; use --device cpu")
    elif device.type not in ("cpu", "cuda", "mps"):
        raise ConfigError(f"--device {name}: lr-opensearch runs on cpu, cuda or mps "
                          f"(here: {available_devices()})")
    return device


def available_devices() -> str:
    """The device names that work on this machine, e.g. ``cpu, cuda:0, cuda:1``."""
    names = ["cpu"]
    if torch.cuda.is_available():
        names += [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    if torch.backends.mps.is_available():
        names.append("mps")
    return ", ".join(names)
