"""recompress_batches: a topic's compression.type applied to batches as Kafka applies it."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.protocol.records import (
    COMPRESSION_GZIP,
    COMPRESSION_LZ4,
    COMPRESSION_NONE,
    COMPRESSION_SNAPPY,
    COMPRESSION_ZSTD,
    build_batch,
    decode_records,
    iter_batches,
    recompress_batches,
    validate_batches,
)

CODECS = [COMPRESSION_NONE, COMPRESSION_GZIP, COMPRESSION_SNAPPY, COMPRESSION_LZ4, COMPRESSION_ZSTD]
LEVELS = {COMPRESSION_GZIP: -1, COMPRESSION_LZ4: 9, COMPRESSION_ZSTD: 3}

records = st.lists(
    st.tuples(
        st.none() | st.binary(max_size=20),
        st.none() | st.binary(max_size=200),
        st.just(()) | st.just((("h", b"v"),)),
    ),
    min_size=1,
    max_size=8,
)


@settings(max_examples=40, deadline=None)
@given(
    batches=st.lists(st.tuples(records, st.sampled_from(CODECS), st.booleans()), max_size=4),
    target=st.sampled_from(CODECS),
)
def test_records_and_header_fields_survive_any_codec_change(
    batches: list[tuple[list, int, bool]], target: int
) -> None:
    data = b"".join(
        build_batch(
            recs,
            base_offset=0,
            timestamp_ms=1_700_000_000_000 + i,
            compression=codec,
            producer_id=7 if idempotent else -1,
            producer_epoch=1 if idempotent else -1,
            base_sequence=10 * i if idempotent else -1,
        )
        for i, (recs, codec, idempotent) in enumerate(batches)
    )
    out = recompress_batches(data, target, LEVELS.get(target))
    before = validate_batches(data) if data else []
    after = validate_batches(out) if out else []  # lengths and CRCs are right
    assert [h.compression for h in after] == [target] * len(before)
    ignore = {"crc": 0, "batch_length": 0, "attributes": 0}
    assert [replace(h, **ignore) for h in after] == [replace(h, **ignore) for h in before]
    assert [h.attributes & ~0x07 for h in after] == [h.attributes & ~0x07 for h in before]
    assert decode_records(out) == decode_records(data)


def test_batches_already_in_the_target_codec_are_kept_byte_for_byte() -> None:
    batch = build_batch([(b"k", b"v" * 100, ())], timestamp_ms=1, compression=COMPRESSION_GZIP)
    assert recompress_batches(batch, COMPRESSION_GZIP, 9) == batch
    [(_, header)] = list(iter_batches(recompress_batches(batch, COMPRESSION_NONE)))
    assert header.compression == COMPRESSION_NONE
