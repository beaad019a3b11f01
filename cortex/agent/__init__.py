"""cortex-agent: reports a compute host's GPU, NVLink, PCIe and NUMA topology to the Cortex API.

It reads NVML (``pynvml`` from nvidia-ml-py, imported lazily so this package imports
without it) and sysfs/procfs under configurable roots, and talks to the API over HTTP
only; it imports nothing of Cortex's server layers.
"""
