"""The names of Kafka's internal topics, defined once (Kafka's ``Topic`` constants).

``__consumer_offsets`` holds the groups and their committed offsets (the group
coordinator's records), ``__transaction_state`` the transactional ids (the
transaction coordinator's). Clients may not produce to either, delete them, or
change the configs their coordinators rely on.
"""

from __future__ import annotations

OFFSETS_TOPIC = "__consumer_offsets"
TRANSACTION_STATE_TOPIC = "__transaction_state"
