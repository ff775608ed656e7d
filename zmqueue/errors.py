"""The one exception tree of zmqueue, and the one place wire error codes live.

Every error a user can see derives from :class:`ZmqueueError`. Each class that
can cross the wire has a stable numeric ``code`` (:class:`ErrorCode`); the host
encodes an exception as ``(code, message, details)`` and the client turns the
triple back into the same class with :func:`from_wire`. Adding an error means
adding one enum member and one class here, nothing else.

Exceptions carry context (``details``): a not-leader error names the leader to
try, a too-large error names the size and the limit, a throttled error names
how long to wait.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Any, ClassVar


class ErrorCode(IntEnum):
    """Wire error codes (protocol v1). Never renumber; only append."""

    INTERNAL = 1
    MALFORMED_FRAME = 2
    UNSUPPORTED_VERSION = 3
    UNKNOWN_COMMAND = 4
    INVALID_PARAMETER = 5
    QUEUE_NOT_FOUND = 6
    QUEUE_ALREADY_EXISTS = 7
    MESSAGE_TOO_LARGE = 8
    INVALID_RECEIPT = 9
    THROTTLED = 10
    UNAVAILABLE = 11
    NOT_LEADER = 12
    DISK_FULL = 13
    QUEUE_LIMIT_REACHED = 14
    ACCESS_DENIED = 15
    STALE_EPOCH = 16
    TIMEOUT = 17
    WRONG_PARTITION = 18


class ZmqueueError(Exception):
    """Root of every zmqueue error."""

    code: ClassVar[ErrorCode] = ErrorCode.INTERNAL

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details: dict[str, Any] = details

    def __str__(self) -> str:
        return self.message


class InternalError(ZmqueueError):
    """A bug or an unexpected condition on the host; the request may be retried."""

    code = ErrorCode.INTERNAL


class ProtocolError(ZmqueueError):
    """A frame could not be decoded."""

    code = ErrorCode.MALFORMED_FRAME


class UnsupportedVersion(ProtocolError):
    code = ErrorCode.UNSUPPORTED_VERSION


class UnknownCommand(ProtocolError):
    code = ErrorCode.UNKNOWN_COMMAND


class InvalidParameter(ZmqueueError, ValueError):
    """A parameter is out of range or of the wrong type; details name it."""

    code = ErrorCode.INVALID_PARAMETER


class ConfigError(InvalidParameter):
    """A configuration value is invalid (raised by ``validate()``)."""


class QueueNotFound(ZmqueueError):
    code = ErrorCode.QUEUE_NOT_FOUND


class QueueAlreadyExists(ZmqueueError):
    """A queue of that name exists with a different configuration."""

    code = ErrorCode.QUEUE_ALREADY_EXISTS


class MessageTooLarge(InvalidParameter):
    """details: ``size`` and ``limit`` in bytes."""

    code = ErrorCode.MESSAGE_TOO_LARGE


class InvalidReceipt(ZmqueueError):
    """The receipt handle is malformed, or stale (the message was redelivered
    or deleted since it was issued)."""

    code = ErrorCode.INVALID_RECEIPT


class Throttled(ZmqueueError):
    """details: ``retry_after_ms``."""

    code = ErrorCode.THROTTLED


class Unavailable(ZmqueueError):
    """No host could serve the request now (down, unreachable, timed out)."""

    code = ErrorCode.UNAVAILABLE


class RequestTimeout(Unavailable):
    code = ErrorCode.TIMEOUT


class ConnectionLost(RequestTimeout):
    """The client's connection to a host dropped (or was refused) while a
    request waited: its reply cannot come, so it failed at once instead of
    after the request timeout; retried like a timeout. Client side only;
    details: ``endpoint``."""


class NotLeader(Unavailable):
    """details: ``leader`` (node id, or None when unknown) and ``endpoint``."""

    code = ErrorCode.NOT_LEADER


class WrongPartition(ZmqueueError):
    """A FIFO send reached a partition its message group does not map to,
    by the host's partition count (the sender's count is stale: partitions
    were added, or the queue was created again with another count). Nothing
    was stored. details: ``group``, ``partition`` (the group's, by the host's
    count), ``partitions`` (the host's count). The client library re-reads
    the queue and sends the messages to their groups' partitions."""

    code = ErrorCode.WRONG_PARTITION


class StaleEpoch(ZmqueueError):
    """A write carried an epoch older than the current leadership term."""

    code = ErrorCode.STALE_EPOCH


class BackPressure(ZmqueueError):
    """Base of the errors a sender gets when the store cannot take more."""

    code = ErrorCode.DISK_FULL


class DiskFull(BackPressure):
    """The data directory's disk is full; details: ``path``."""

    code = ErrorCode.DISK_FULL


class QueueLimitReached(BackPressure):
    """A configured queue limit is reached; details: ``limit`` and ``value``."""

    code = ErrorCode.QUEUE_LIMIT_REACHED


class AccessDenied(ZmqueueError):
    code = ErrorCode.ACCESS_DENIED


class ConsulUnavailable(Unavailable):
    """Consul could not be reached; details: ``address``."""


class NotConsul(ConsulUnavailable):
    """An HTTP server answered at the Consul address given but is not a Consul
    agent (a web app on that port): the message names the address and says to
    check ``--consul`` / ``CONSUL_HTTP_ADDR``."""


class StartupError(ZmqueueError):
    """A host or a local cluster cannot start (port in use, data dir not
    writable, Consul unreachable); the message says what to do."""


class ClientClosed(ZmqueueError):
    """The client was closed (``Client.close()``, or its ``with`` block ended);
    not retried: connect again with ``zmqueue.connect``."""


class NotSent(ZmqueueError):
    """A pipelined send that never went out: its pipeline was closed (or its
    ``with`` block left by an exception) first. Not stored; send it again."""


class CorruptSegment(ZmqueueError):
    """A segment block failed its checksum or is malformed (storage internal;
    recovery reports it, never raises it to a client)."""


_BY_CODE: dict[int, type[ZmqueueError]] = {}
for _cls in (
    InternalError,
    ProtocolError,
    UnsupportedVersion,
    UnknownCommand,
    InvalidParameter,
    QueueNotFound,
    QueueAlreadyExists,
    MessageTooLarge,
    InvalidReceipt,
    Throttled,
    Unavailable,
    NotLeader,
    DiskFull,
    QueueLimitReached,
    AccessDenied,
    StaleEpoch,
    RequestTimeout,
    WrongPartition,
):
    _BY_CODE[int(_cls.code)] = _cls


def to_wire(exc: ZmqueueError) -> dict[str, Any]:
    """Encode an exception as the body of an error reply."""
    return {"code": int(exc.code), "message": exc.message, "details": exc.details}


def from_wire(body: Any) -> ZmqueueError:
    """Decode an error reply body into the matching exception class.

    Unknown codes become :class:`InternalError` so an older client still gets a
    readable error from a newer host.
    """
    if not isinstance(body, dict):
        return ProtocolError(f"malformed error reply: {body!r:.200}")
    code = body.get("code")
    message = str(body.get("message", "error"))
    details = body.get("details") or {}
    if not isinstance(details, dict):
        details = {}
    cls = _BY_CODE.get(code if isinstance(code, int) else -1, InternalError)
    return cls(message, **{str(k): v for k, v in details.items()})
