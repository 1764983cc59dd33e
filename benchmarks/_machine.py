"""One line describing the machine a benchmark ran on (for BENCHMARKS.md)."""

import os
import platform


def describe() -> str:
    """CPU model, core count and Python version."""
    with open("/proc/cpuinfo") as f:
        cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "?")
    return f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}"
