"""Reclaim notices read from each cloud's metadata service, over HTTP, in each cloud's own format."""

from __future__ import annotations

from datetime import datetime, timezone

import httpx
import pytest

from scheduler.agent.reclaim import (
    MetadataError,
    ReclaimNotice,
    parse_alibaba,
    parse_aws,
    parse_tencent,
    reclaim_notice,
)
from tests.fakes.metadata import MetadataServer

AT = datetime(2026, 12, 4, 10, 5, tzinfo=timezone.utc)


@pytest.fixture
def metadata():
    server = MetadataServer()
    yield server
    server.close()


@pytest.mark.parametrize("cloud", ["aws", "alibaba", "tencent"])
def test_no_notice_then_a_notice_at_the_right_utc_time(metadata, cloud):
    with httpx.Client(timeout=5) as http:
        assert reclaim_notice(cloud, http, metadata.url) is None
        metadata.notify(cloud, AT)
        notice = reclaim_notice(cloud, http, metadata.url)
    assert notice == ReclaimNotice(cloud=cloud, action="terminate", at=AT)


def test_aws_asks_for_an_imdsv2_token_first(metadata):
    metadata.notify("aws", AT)
    with httpx.Client(timeout=5) as http:
        assert reclaim_notice("aws", http, metadata.url) is not None
        assert http.get(metadata.url + "/latest/meta-data/spot/instance-action").status_code == 401  # v1 refused
    assert metadata.requests[0] == ("PUT", "/latest/api/token")


@pytest.mark.parametrize("parse, text, expected", [
    (parse_aws, '{"action": "stop", "time": "2026-12-04T10:05:00Z"}', ("stop", AT)),
    (parse_alibaba, "2026-12-04T10:05:00Z\n", ("terminate", AT)),
    (parse_tencent, "2026-12-04 18:05:00", ("terminate", AT)),  # Beijing time, no marker
    (parse_tencent, "2026-12-04T10:05:00+00:00", ("terminate", AT)),  # an explicit offset wins
])
def test_each_cloud_format_parses(parse, text, expected):
    notice = parse(text)
    assert (notice.action, notice.at) == expected


@pytest.mark.parametrize("parse, text", [
    (parse_aws, "not json"), (parse_aws, '{"action": "terminate"}'), (parse_alibaba, "soon"), (parse_tencent, ""),
])
def test_an_unreadable_answer_is_an_error_not_a_notice(parse, text):
    with pytest.raises(MetadataError):
        parse(text)


def test_an_unknown_cloud_is_refused():
    with httpx.Client() as http, pytest.raises(ValueError, match="no reclaim notices"):
        reclaim_notice("sandbox", http)
