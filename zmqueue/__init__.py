"""zmqueue: an SQS-like distributed message queue on ZeroMQ and Consul."""
from zmqueue.version import __version__

__all__ = ["__version__"]
