"""zmqueue: an SQS-like distributed message queue on ZeroMQ and Consul.

```python
import zmqueue
with zmqueue.connect(consul="127.0.0.1:8500") as client:
    q = client.create_queue("purchases")
    q.send(b"hello")
    for m in q.receive(max_messages=10, wait_time=5):
        q.delete(m.receipt)
```
"""

from zmqueue.client import (
    Client,
    Message,
    OutgoingMessage,
    PendingSend,
    Queue,
    ReceivePipeline,
    SendPipeline,
    Subscription,
    connect,
)
from zmqueue.client.breaker import BulkheadFull, CircuitOpen
from zmqueue.config import HostConfig, QueueConfig
from zmqueue.errors import (
    AccessDenied,
    BackPressure,
    ClientClosed,
    ConfigError,
    ConnectionLost,
    ConsulUnavailable,
    DiskFull,
    InternalError,
    InvalidParameter,
    InvalidReceipt,
    MessageTooLarge,
    NotConsul,
    NotLeader,
    NotSent,
    ProtocolError,
    QueueAlreadyExists,
    QueueLimitReached,
    QueueNotFound,
    RequestTimeout,
    StaleEpoch,
    Throttled,
    Unavailable,
    WrongPartition,
    ZmqueueError,
)
from zmqueue.version import __version__

__all__ = [
    "AccessDenied",
    "BackPressure",
    "BulkheadFull",
    "CircuitOpen",
    "Client",
    "ClientClosed",
    "ConfigError",
    "ConnectionLost",
    "ConsulUnavailable",
    "DiskFull",
    "HostConfig",
    "InternalError",
    "InvalidParameter",
    "InvalidReceipt",
    "Message",
    "MessageTooLarge",
    "NotConsul",
    "NotLeader",
    "NotSent",
    "OutgoingMessage",
    "PendingSend",
    "ProtocolError",
    "Queue",
    "QueueAlreadyExists",
    "QueueConfig",
    "QueueLimitReached",
    "QueueNotFound",
    "ReceivePipeline",
    "RequestTimeout",
    "SendPipeline",
    "StaleEpoch",
    "Subscription",
    "Throttled",
    "Unavailable",
    "WrongPartition",
    "ZmqueueError",
    "__version__",
    "connect",
]
