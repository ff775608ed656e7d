"""Storage engine: per-partition numpy ring buffer + append-only LZ4 segment log.

The host uses only :class:`PartitionStore` (or :class:`PartitionStoreProtocol`)
and the value types re-exported here; it never touches files or arrays.  The
on-disk format is documented in :mod:`zmqueue.dataplane.storage.records` and
``docs/SEGMENT_FORMAT.md``.
"""

from zmqueue.dataplane.storage.config import StorageConfig
from zmqueue.dataplane.storage.limits import disk_free
from zmqueue.dataplane.storage.model import Columns, Delivered, NewMessage, Record
from zmqueue.dataplane.storage.records import RecordType
from zmqueue.dataplane.storage.recovery import CorruptBlock, RecoveryReport
from zmqueue.dataplane.storage.store import PartitionStore, PartitionStoreProtocol

__all__ = [
    "Columns",
    "CorruptBlock",
    "Delivered",
    "NewMessage",
    "PartitionStore",
    "PartitionStoreProtocol",
    "Record",
    "RecordType",
    "RecoveryReport",
    "StorageConfig",
    "disk_free",
]
