"""What a benchmark ran on: the host's CPU, memory and load, and the Vulkan devices vkcap sees there."""
from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo, else what ``platform`` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def vulkan_devices(env: dict[str, str] | None = None) -> str:
    """``vkcap devices`` under ``env``: "name (driver)" for each device, or "unknown (why)" when it fails
    (a benchmark still runs without a device name)."""
    try:
        proc = subprocess.run([sys.executable, "-m", "vkcap", "devices", "--json"], capture_output=True, text=True,
                              timeout=120, env=env, cwd=REPO)
        devices = json.loads(proc.stdout)
        return ", ".join(f"{d['device_name']} ({d.get('driver_info') or d.get('driver_name', '')})" for d in devices)
    except Exception as exc:  # noqa: BLE001
        return f"unknown ({type(exc).__name__})"


def machine_info(env: dict[str, str] | None = None) -> dict[str, Any]:
    """The machine a benchmark's figures come from, for its report and JSON."""
    try:
        memory_gib: float | None = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    except (ValueError, OSError):
        memory_gib = None
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = float("nan")
    return {
        "host": platform.node(),
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "memory_gib": memory_gib,
        "load_avg_1min_at_start": load,
        "vulkan_device": vulkan_devices(env),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }
