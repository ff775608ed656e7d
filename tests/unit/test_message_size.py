"""MESSAGE_TOO_LARGE says what the size is made of, and the client counts it as the host does."""

from __future__ import annotations

import pytest

from zmqueue.errors import MessageTooLarge
from zmqueue.protocol import check_size


def test_a_body_at_the_limit_with_a_group_id_names_the_ids_not_only_attributes() -> None:
    """(A 1,024-byte body with group_id "g" and no attributes on a 1,024-byte
    queue was refused as "1029 bytes (body + attributes)".)"""
    blob = b"\x81\xa1g\xa1g"  # what a group id alone is stored as (a msgpack map)
    check_size(b"x" * 1019, blob, 1024)
    with pytest.raises(MessageTooLarge, match=r"message 3: 1029 bytes \(body 1024 \+ attributes, group and "
                                              r"dedup ids 5, as stored\) exceed the queue's limit of 1024"):
        check_size(b"x" * 1024, blob, 1024, at=3)


def test_the_client_counts_attributes_and_ids_against_the_limit_before_sending_as_the_host_does() -> None:
    """(The client checked the body alone: a small body with large attributes
    went to a host, which refused it, and a batch's other partitions' requests
    were already sent.)"""
    from zmqueue.client.models import OutgoingMessage, batch_wire
    from zmqueue.protocol import encode_blob

    attrs: dict[str, str | int | float | bytes] = {"big": "y" * 900, "n": 7}
    blob = encode_blob(attrs, "g", "d")
    at_limit = OutgoingMessage(b"x" * (1024 - len(blob)), attributes=attrs, group_id="g", dedup_id="d")
    over_body = b"x" * (1025 - len(blob))
    over = OutgoingMessage(over_body, attributes=attrs, group_id="g", dedup_id="d")
    assert len(batch_wire([at_limit], fifo=True, max_message_bytes=1024)) == 1
    with pytest.raises(MessageTooLarge) as host:
        check_size(over_body, blob, 1024, at=2)  # what the host raises for it, as message 2 of a SEND
    with pytest.raises(MessageTooLarge) as client:
        batch_wire([at_limit, at_limit, over], fifo=True, max_message_bytes=1024)
    assert str(client.value) == str(host.value)
    assert client.value.details == {"size": 1025, "limit": 1024, "index": 2}
