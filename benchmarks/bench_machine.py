"""The machine a benchmark ran on, shared by conftest.py (pytest-benchmark's machine_info) and
memintelli_models.py (the peer records)."""
import platform


def cpu_model():
    """The CPU's model name (/proc/cpuinfo), else what the platform module knows."""
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()
