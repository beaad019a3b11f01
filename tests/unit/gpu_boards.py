"""The PCI addresses of the fake GPU boards, and a request's guest CPUs pinned nowhere."""

HGX = ("0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0",
       "0000:9a:00.0", "0000:ab:00.0", "0000:ba:00.0", "0000:db:00.0")
A100S = ("0000:17:00.0", "0000:31:00.0", "0000:b1:00.0", "0000:ca:00.0")

FLOATING = {"pinned": False, "numa_nodes": 0}
