"""Options, offsets JSON, schema and planning of the onceflow source, without Spark jobs."""

from __future__ import annotations

import json

import pytest
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows
from pyspark.sql.types import StringType, StructField, StructType

from onceflow.spark import OptionError, kafka_client_config
from onceflow.spark.offsets import from_json_dict, offsets_json, to_json_dict
from onceflow.spark.options import (
    check_batch_source,
    check_stream_source,
    parse_source_options,
)
from onceflow.spark.range_reader import KafkaRange
from onceflow.spark.reader import OnceflowStreamReader, _cap_at_target, _rate_limit, plan_ranges
from onceflow.spark.source_schema import arrow_schema, check_schema, kafka_schema

BOOT = {"kafka.bootstrap.servers": "127.0.0.1:1"}


def test_kafka_client_config_strips_the_prefix() -> None:
    conf = kafka_client_config(
        {"kafka.bootstrap.servers": "h:1", "KAFKA.Client.Id": "c", "subscribe": "t", "kafka.": "x"}
    )
    assert conf == {"bootstrap.servers": "h:1", "client.id": "c"}


def test_defaults() -> None:
    opts = parse_source_options({**BOOT, "subscribe": "a, b,a"})
    assert opts.subscription.kind == "subscribe"
    assert opts.subscription.topics == ("a", "b")
    assert opts.starting is None and opts.ending is None
    assert opts.fail_on_data_loss is True
    assert opts.include_headers is False
    assert opts.max_offsets_per_trigger is None
    assert opts.kafka == {"bootstrap.servers": "127.0.0.1:1"}


def test_values_parse() -> None:
    opts = parse_source_options(
        {
            **BOOT,
            "assign": '{"t": [1, 0], "u": [3]}',
            "startingoffsets": '{"t": {"0": 23, "1": -2}, "u": {"3": -1}}',
            "endingoffsets": "latest",
            "maxoffsetspertrigger": "100",
            "failondataloss": "False",
            "includeheaders": "TRUE",
            "kafkaconsumer.polltimeoutms": "5000",
        }
    )
    assert opts.subscription.partitions == (("t", 0), ("t", 1), ("u", 3))
    assert opts.starting == {("t", 0): 23, ("t", 1): -2, ("u", 3): -1}
    assert opts.ending == "latest"
    assert opts.max_offsets_per_trigger == 100
    assert opts.fail_on_data_loss is False
    assert opts.include_headers is True
    assert opts.poll_timeout_ms == 5000


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"subscribe": "t", "bogus": "1"}, "'bogus'"),
        ({"subscribe": "t", "topic": "t"}, "'topic' is a write option"),
        ({"subscribe": "t", "sinkid": "s"}, "'sinkId' is a write option"),
        ({"subscribe": "t", "minpartitions": "4"}, "'minPartitions'"),
        ({}, "'subscribe'"),
        ({"subscribe": "t", "assign": '{"t":[0]}'}, "'assign' and 'subscribe'"),
        ({"subscribe": "t", "subscribepattern": "t.*"}, "'subscribe' and 'subscribePattern'"),
        ({"subscribe": "a,,b"}, "'subscribe'"),
        ({"subscribepattern": "t(["}, "'subscribePattern'"),
        ({"assign": "[0]"}, "'assign'"),
        ({"assign": '{"t":[-1]}'}, "'assign'"),
        ({"subscribe": "t", "startingoffsets": "newest"}, "'startingOffsets'"),
        ({"subscribe": "t", "startingoffsets": '{"t":{"x":1}}'}, "'startingOffsets'"),
        ({"subscribe": "t", "startingoffsets": '{"t":{"0":-3}}'}, "'startingOffsets'"),
        ({"subscribe": "t", "endingoffsets": '{"t":[1]}'}, "'endingOffsets'"),
        ({"subscribe": "t", "failondataloss": "yes"}, "'failOnDataLoss'"),
        ({"subscribe": "t", "includeheaders": "1"}, "'includeHeaders'"),
        ({"subscribe": "t", "maxoffsetspertrigger": "0"}, "'maxOffsetsPerTrigger'"),
        ({"subscribe": "t", "kafka.group.id": "g"}, "'kafka.group.id'"),
        ({"subscribe": "t", "kafka.enable.auto.commit": "true"}, "'kafka.enable.auto.commit'"),
        (
            {"subscribe": "t", "kafka.isolation.level": "read_uncommitted"},
            "'kafka.isolation.level'",
        ),
        ({"subscribe": "t", "kafka.auto.offset.reset": "earliest"}, "'kafka.auto.offset.reset'"),
    ],
)
def test_bad_options_name_the_option(options: dict[str, str], named: str) -> None:
    with pytest.raises(OptionError, match=named.replace("(", r"\(")):
        parse_source_options({**BOOT, **options})


def test_bootstrap_servers_are_required() -> None:
    with pytest.raises(OptionError, match=r"'kafka\.bootstrap\.servers'"):
        parse_source_options({"subscribe": "t"})


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"startingoffsets": "latest"}, "'startingOffsets'"),
        ({"startingoffsets": '{"t":{"0":-1}}'}, "'startingOffsets'"),
        ({"endingoffsets": "earliest"}, "'endingOffsets'"),
        ({"endingoffsets": '{"t":{"0":-2}}'}, "'endingOffsets'"),
        ({"maxoffsetspertrigger": "5"}, "'maxOffsetsPerTrigger'"),
    ],
)
def test_batch_only_contradictions(options: dict[str, str], named: str) -> None:
    opts = parse_source_options({**BOOT, "subscribe": "t", **options})
    with pytest.raises(OptionError, match=named):
        check_batch_source(opts)


def test_ending_offsets_contradict_a_stream() -> None:
    opts = parse_source_options({**BOOT, "subscribe": "t", "endingoffsets": "latest"})
    with pytest.raises(OptionError, match="'endingOffsets'"):
        check_stream_source(opts)
    # The stream reader keeps the error and raises it from the first call Spark makes.
    reader = OnceflowStreamReader(
        {**BOOT, "subscribe": "t", "endingoffsets": "latest"}, kafka_schema(False)
    )
    with pytest.raises(OptionError, match="'endingOffsets'"):
        reader.initialOffset()
    with pytest.raises(OptionError, match="'endingOffsets'"):
        reader.latestOffset({}, ReadAllAvailable())


def test_fixed_schema() -> None:
    check_schema(kafka_schema(True), include_headers=True)
    with pytest.raises(OptionError, match="fixed schema"):
        check_schema(StructType([StructField("value", StringType())]), include_headers=False)
    with pytest.raises(OptionError, match="includeHeaders"):
        check_schema(kafka_schema(True), include_headers=False)


@pytest.mark.parametrize("headers", [False, True])
def test_arrow_schema_is_what_spark_expects(headers: bool) -> None:
    expected = to_arrow_schema(kafka_schema(headers), timezone="UTC")
    assert arrow_schema(headers).equals(expected)
    names = [f.name for f in kafka_schema(headers).fields]
    assert names[:7] == [
        "key",
        "value",
        "topic",
        "partition",
        "offset",
        "timestamp",
        "timestampType",
    ]
    assert (
        kafka_schema(True)
        .simpleString()
        .endswith("headers:array<struct<key:string,value:binary>>>")
    )


def test_offsets_json_has_a_fixed_order() -> None:
    offsets = {("b", 0): 3, ("a", 10): 2, ("a", 1): 7, ("a", 0): 5}
    assert offsets_json(offsets) == '{"a":{"0":5,"1":7,"10":2},"b":{"0":3}}'
    as_dict = to_json_dict(offsets)
    assert json.dumps(as_dict) == json.dumps(to_json_dict(dict(reversed(offsets.items()))))
    assert from_json_dict(json.loads(json.dumps(as_dict))) == offsets
    with pytest.raises(ValueError):
        from_json_dict({"a": {"0": "5"}})


def test_plan_ranges_one_per_non_empty_partition() -> None:
    start = {("t", 0): 5, ("t", 1): 7, ("u", 0): 0}
    end = {("t", 0): 9, ("t", 1): 7, ("u", 0): 0, ("v", 0): 4}
    assert plan_ranges(start, end) == [
        KafkaRange("t", 0, 5, 9),
        KafkaRange("v", 0, 0, 4),  # a new partition is read from its beginning
    ]


def test_rate_limit_shares_in_proportion() -> None:
    begin = {("t", 0): 0, ("t", 1): 100}
    end = {("t", 0): 90, ("t", 1): 110, ("t", 2): 0}
    limited = _rate_limit(begin, end, 50)
    assert limited == {("t", 0): 45, ("t", 1): 105, ("t", 2): 0}
    assert _rate_limit(begin, end, 1000) == end
    # A partition with a tiny share still moves.
    tiny = _rate_limit({("a", 0): 0, ("b", 0): 0}, {("a", 0): 1000, ("b", 0): 1}, 10)
    assert tiny == {("a", 0): 9, ("b", 0): 1}


def test_available_now_caps_at_the_target() -> None:
    begin = {("t", 0): 5, ("t", 1): 3}
    end = {("t", 0): 20, ("t", 1): 9, ("u", 0): 4}
    target = {("t", 0): 10, ("t", 1): 30}
    assert _cap_at_target(begin, end, target) == {("t", 0): 10, ("t", 1): 9}


def test_read_limit_from_options() -> None:
    reader = OnceflowStreamReader({**BOOT, "subscribe": "t"}, kafka_schema(False))
    assert isinstance(reader.getDefaultReadLimit(), ReadAllAvailable)
    reader = OnceflowStreamReader(
        {**BOOT, "subscribe": "t", "maxoffsetspertrigger": "7"}, kafka_schema(False)
    )
    assert reader.getDefaultReadLimit() == ReadMaxRows(7)
