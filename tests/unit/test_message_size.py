"""MESSAGE_TOO_LARGE says what the size is made of."""

from __future__ import annotations

import pytest

from zmqueue.dataplane.messages import check_size
from zmqueue.errors import MessageTooLarge


def test_a_body_at_the_limit_with_a_group_id_names_the_ids_not_only_attributes() -> None:
    """(A 1,024-byte body with group_id "g" and no attributes on a 1,024-byte
    queue was refused as "1029 bytes (body + attributes)".)"""
    blob = b"\x81\xa1g\xa1g"  # what a group id alone is stored as (a msgpack map)
    check_size(b"x" * 1019, blob, 1024)
    with pytest.raises(MessageTooLarge, match=r"message 3: 1029 bytes \(body 1024 \+ attributes, group and "
                                              r"dedup ids 5, as stored\) exceed the queue's limit of 1024"):
        check_size(b"x" * 1024, blob, 1024, at=3)
