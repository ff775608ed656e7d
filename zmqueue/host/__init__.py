"""The host process: the composition root wiring data plane and control plane."""

from zmqueue.host.host import Host

__all__ = ["Host"]
