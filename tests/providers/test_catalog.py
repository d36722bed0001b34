"""The bundled catalog: every row loads, every number says where it came from, the filters work."""

from __future__ import annotations

import csv
import io
import re
from datetime import datetime, timezone
from decimal import Decimal
from importlib import resources
from pathlib import Path

import pytest

from providers.catalog import (
    COLUMNS,
    filter_offers,
    load_catalog,
    owned_offers,
    parse_catalog,
    regions_of,
)
from scheduler.errors import UserError
from scheduler.gpus import GPUS
from scheduler.models import Offer, ReservedCapacity

OFFERS = load_catalog()
BUNDLED_TEXT = resources.files("providers").joinpath("data/catalog.csv").read_text(encoding="utf-8")
HEADER, FIRST_ROW = BUNDLED_TEXT.splitlines()[:2]


def _find(provider: str, zone: str, instance_type: str) -> Offer:
    [offer] = [o for o in OFFERS if (o.provider, o.zone, o.instance_type) == (provider, zone, instance_type)]
    return offer


def test_every_row_loads_as_an_offer() -> None:
    rows = [line for line in BUNDLED_TEXT.splitlines()[1:] if line.strip()]
    assert len(OFFERS) == len(rows)
    assert len({o.key for o in OFFERS}) == len(OFFERS)


@pytest.mark.parametrize("provider, currency", [("aws", "USD"), ("alibaba", "CNY"), ("tencent", "USD"),
                                                ("huawei", "CNY")])
def test_prices_are_decimal_in_the_currency_they_were_published_in(provider: str, currency: str) -> None:
    offers = filter_offers(OFFERS, providers=[provider])
    assert offers
    for o in offers:
        assert o.on_demand is not None, o.key
        for price in (o.on_demand, o.spot):
            if price is None:
                continue
            assert isinstance(price.per_hour.amount, Decimal)
            assert price.per_hour.currency == currency, o.key
            assert price.per_hour.amount > 0


def test_every_price_and_rate_names_its_source_and_date() -> None:
    newest = datetime(2026, 11, 9, tzinfo=timezone.utc).date()  # the newest snapshot in the sources
    for o in OFFERS:
        for price in (o.on_demand, o.spot):
            if price is not None:
                assert price.source.strip(), o.key
                assert price.as_of <= newest, o.key
        assert o.gpu in GPUS


def test_interruption_rates_are_labelled_estimates() -> None:
    text_rows = list(_csv_rows())
    assert text_rows
    for row in text_rows:
        assert row["interruptions_source"].startswith("estimate"), row["instance_type"]
        assert float(row["spot_interruptions_per_hour"]) > 0


def test_aws_spot_is_the_midpoint_of_the_range_its_source_quotes() -> None:
    for o in filter_offers(OFFERS, providers=["aws"]):
        assert o.spot is not None and o.on_demand is not None
        low, high = re.search(r"range (\d+\.\d+)-(\d+\.\d+)", o.spot.source).groups()  # type: ignore[union-attr]
        assert o.spot.per_hour.amount == (Decimal(low) + Decimal(high)) / 2, o.key
        assert o.spot.per_hour <= o.on_demand.per_hour
        assert o.spot.source.startswith("A1")


def test_alibaba_spot_is_the_estimate_its_source_describes() -> None:
    for o in filter_offers(OFFERS, providers=["alibaba"]):
        assert o.spot is not None and o.on_demand is not None
        assert o.spot.source.startswith("estimate:")
        share = Decimal(re.search(r"(\d+)% of the B1 list price", o.spot.source).group(1)) / 100  # type: ignore[union-attr]
        assert o.spot.per_hour.amount == o.on_demand.per_hour.amount * share, o.key


def test_tencent_prices_outside_guangzhou_3_are_labelled_as_assumed() -> None:
    tencent = filter_offers(OFFERS, providers=["tencent"])
    reference = {o.instance_type: o.on_demand for o in tencent if o.zone == "ap-guangzhou-3"}
    assert reference
    for o in tencent:
        assert o.spot is None  # no GPU spot figure exists for Tencent
        assert o.on_demand is not None
        assert o.on_demand.per_hour == reference[o.instance_type].per_hour  # type: ignore[union-attr]
        if o.zone != "ap-guangzhou-3":
            assert "assumed equal to Guangzhou Zone 3" in o.on_demand.source


def test_huawei_prices_are_the_stand_ins_their_sources_name() -> None:
    # No Huawei price is published where the catalog looked (docs/prices.md, H1): each row names the Alibaba
    # type whose B1 price stands in. The stand-in must sell the same GPU model and count, at that price.
    huawei = filter_offers(OFFERS, providers=["huawei"])
    assert huawei
    for o in huawei:
        assert o.on_demand is not None and o.spot is not None
        assert o.on_demand.source.startswith("estimate:"), o.key
        stand_in = re.search(r"stand-in: Alibaba (\S+) B1", o.on_demand.source).group(1)  # type: ignore[union-attr]
        alibaba = [a for a in OFFERS if a.provider == "alibaba" and a.instance_type == stand_in]
        assert alibaba, f"{o.key}: no Alibaba {stand_in} in the catalog"
        assert {(a.gpu, a.gpu_count) for a in alibaba} == {(o.gpu, o.gpu_count)}, o.key
        assert o.on_demand.per_hour in {a.on_demand.per_hour for a in alibaba if a.on_demand}, o.key
        assert o.spot.per_hour.amount == o.on_demand.per_hour.amount * Decimal("0.45"), o.key


@pytest.mark.parametrize(
    "provider, zone, instance_type, on_demand, currency",
    [
        # Figures as the sources in docs/prices.md give them.
        ("aws", "us-east-1a", "g4dn.xlarge", "0.526", "USD"),
        ("aws", "ap-northeast-1c", "g5.2xlarge", "1.75776", "USD"),
        ("aws", "us-east-1b", "p4d.24xlarge", "21.957642", "USD"),
        ("alibaba", "cn-hangzhou-h", "ecs.gn7i-c8g1.2xlarge", "9.5326", "CNY"),
        ("alibaba", "cn-wulanchabu-a", "ecs.gn6v-c8g1.8xlarge", "57.15", "CNY"),
        ("tencent", "ap-guangzhou-3", "GN10Xp.2XLARGE40", "1.72", "USD"),
    ],
)
def test_sourced_on_demand_prices_are_carried_exactly(
    provider: str, zone: str, instance_type: str, on_demand: str, currency: str
) -> None:
    offer = _find(provider, zone, instance_type)
    assert offer.on_demand is not None
    assert offer.on_demand.per_hour.amount == Decimal(on_demand)
    assert offer.on_demand.per_hour.currency == currency


@pytest.mark.parametrize(
    "provider, gpus",
    [
        ("aws", {"T4", "A10G", "L4", "V100", "A100-40G", "H100"}),
        ("alibaba", {"T4", "A10", "V100", "V100-32G", "A100-80G"}),
        ("tencent", {"T4", "V100-32G"}),
        ("huawei", {"T4", "V100", "V100-32G", "A100-80G"}),
    ],
)
def test_each_cloud_offers_its_gpus(provider: str, gpus: set[str]) -> None:
    assert {o.gpu for o in filter_offers(OFFERS, providers=[provider])} == gpus


@pytest.mark.parametrize(
    "provider, regions",
    [
        ("aws", ["ap-northeast-1", "us-east-1", "us-west-2"]),
        ("alibaba", ["cn-beijing", "cn-hangzhou", "cn-shanghai", "cn-wulanchabu"]),
        ("tencent", ["ap-beijing", "ap-guangzhou", "ap-shanghai"]),
        ("huawei", ["cn-east-3", "cn-north-4"]),
    ],
)
def test_each_cloud_covers_its_regions_with_several_zones(provider: str, regions: list[str]) -> None:
    assert regions_of(OFFERS, provider) == regions
    for region in regions:
        zones = {o.zone for o in filter_offers(OFFERS, providers=[provider], regions=[region])}
        assert len(zones) >= 2, region
        assert all(z.startswith(region) for z in zones)


def test_filters_combine_and_none_means_any() -> None:
    assert filter_offers(OFFERS) == OFFERS
    picked = filter_offers(OFFERS, providers=["aws", "alibaba"], regions=["us-east-1", "cn-hangzhou"], gpus=["T4"])
    assert picked
    assert {(o.provider, o.region, o.gpu) for o in picked} == {
        ("aws", "us-east-1", "T4"), ("alibaba", "cn-hangzhou", "T4")}
    expected = [o for o in OFFERS
                if o.provider in ("aws", "alibaba") and o.region in ("us-east-1", "cn-hangzhou") and o.gpu == "T4"]
    assert picked == expected
    assert filter_offers(OFFERS, gpus=[]) == []
    assert filter_offers(OFFERS, providers=["tencent"], gpus=["H100"]) == []


def test_the_bundled_catalog_is_parsed_once_and_callers_get_their_own_list() -> None:
    first = load_catalog()
    first.clear()
    second = load_catalog()
    assert len(second) == len(OFFERS)
    assert all(a is b for a, b in zip(second, load_catalog()))


def test_a_catalog_file_on_disk_loads_like_the_bundled_one(tmp_path: Path) -> None:
    path = tmp_path / "catalog.csv"
    path.write_text(BUNDLED_TEXT, encoding="utf-8")
    assert load_catalog(path) == OFFERS


def test_a_missing_file_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="cannot read catalog"):
        load_catalog(tmp_path / "nope.csv")


def _replace(row: str, column: str, value: str) -> str:
    cells = next(csv.reader(io.StringIO(row)))
    cells[COLUMNS.index(column)] = value
    out = io.StringIO()
    csv.writer(out, lineterminator="").writerow(cells)
    return out.getvalue()


@pytest.mark.parametrize(
    "column, value, message",
    [
        ("gpu", "K80", "gpu 'K80' is not a known GPU"),
        ("provider", "gcp", "provider 'gcp'"),
        ("currency", "EUR", "currency 'EUR'"),
        ("on_demand", "abc", "on_demand 'abc' is not a number"),
        ("on_demand", "-1", "on_demand must be a positive amount"),
        ("on_demand_source", "", "on_demand has no on_demand_source"),
        ("spot_as_of", "last week", "spot_as_of 'last week' is not a date"),
        ("spot", "99", "spot 99 is above on_demand"),
        ("gpu_count", "0", "gpu_count '0'"),
        ("vcpus", "four", "vcpus 'four'"),
        ("gpu_mem_gib", "0", "gpu_mem_gib must be positive"),
        ("zone", "eu-west-1a", "zone 'eu-west-1a' is not in region"),
        ("stock", "plenty", "stock 'plenty'"),
        ("spot_interruptions_per_hour", "-0.1", "must not be negative"),
        ("interruptions_source", "", "interruptions_source is empty"),
    ],
)
def test_a_malformed_row_names_its_line_and_field(column: str, value: str, message: str) -> None:
    edited = _replace(FIRST_ROW, "zone", "us-east-1z")  # a second zone, so the rows are not duplicates
    text = "\n".join([HEADER, FIRST_ROW, edited])
    bad = "\n".join([HEADER, FIRST_ROW, _replace(edited, column, value)])
    assert len(parse_catalog(text)) == 2  # the unedited rows are fine
    with pytest.raises(UserError) as err:
        parse_catalog(bad, "my.csv")
    assert "my.csv: line 3:" in str(err.value)
    assert message in str(err.value)


def test_a_row_with_the_wrong_number_of_cells_is_rejected() -> None:
    with pytest.raises(UserError, match=r"line 2: 18 cells, expected 19"):
        parse_catalog("\n".join([HEADER, FIRST_ROW.rsplit(",", 1)[0]]))


def test_a_duplicate_row_names_both_lines() -> None:
    with pytest.raises(UserError, match=r"line 3: aws/us-east-1/us-east-1a/g4dn.xlarge is already listed on line 2"):
        parse_catalog("\n".join([HEADER, FIRST_ROW, FIRST_ROW]))


def test_a_header_without_a_column_is_rejected() -> None:
    header = HEADER.replace(",stock", "")
    with pytest.raises(UserError, match=r"line 1: missing column\(s\) stock"):
        parse_catalog("\n".join([header, FIRST_ROW]))


def test_a_row_without_any_price_is_rejected() -> None:
    row = FIRST_ROW
    for column in ("on_demand", "on_demand_source", "on_demand_as_of", "spot", "spot_source", "spot_as_of"):
        row = _replace(row, column, "")
    with pytest.raises(UserError, match="neither an on_demand nor a spot price"):
        parse_catalog("\n".join([HEADER, row]))


# --- reserved capacity ----------------------------------------------------------------

UNTIL = datetime(2027, 6, 30, tzinfo=timezone.utc)


@pytest.mark.parametrize(
    "provider, region, zone, instance_type, expected_zone",
    [
        ("aws", "us-east-1", "us-east-1b", "g5.xlarge", "us-east-1b"),
        ("aws", "us-west-2", None, "g6.xlarge", "us-west-2a"),
        ("alibaba", "cn-hangzhou", "cn-hangzhou-i", "ecs.gn7i-c8g1.2xlarge", "cn-hangzhou-i"),
        ("tencent", "ap-guangzhou", None, "GN7.2XLARGE32", "ap-guangzhou-3"),
    ],
)
def test_reserved_capacity_is_paired_with_its_offer(
    provider: str, region: str, zone: str | None, instance_type: str, expected_zone: str
) -> None:
    r = ReservedCapacity(provider=provider, region=region, zone=zone, instance_type=instance_type, count=2, until=UNTIL)
    [(got_r, offer)] = owned_offers([r], OFFERS)
    assert got_r == r
    assert (offer.provider, offer.region, offer.zone, offer.instance_type) == (
        provider, region, expected_zone, instance_type)


def test_every_declaration_gets_its_own_pair_in_order() -> None:
    rs = [
        ReservedCapacity(provider="aws", region="us-east-1", instance_type="g4dn.xlarge", count=1, until=UNTIL),
        ReservedCapacity(provider="alibaba", region="cn-beijing", instance_type="ecs.gn6i-c4g1.xlarge", count=3,
                         until=UNTIL),
    ]
    pairs = owned_offers(rs, OFFERS)
    assert [r for r, _ in pairs] == rs
    assert [o.instance_type for _, o in pairs] == ["g4dn.xlarge", "ecs.gn6i-c4g1.xlarge"]


@pytest.mark.parametrize(
    "provider, region, zone, instance_type, message",
    [
        ("aws", "us-east-1", None, "g9.huge", "not an instance type the catalog knows there"),
        ("aws", "eu-west-1", None, "g5.xlarge", "g5.xlarge is listed in ap-northeast-1, us-east-1, us-west-2"),
        ("aws", "us-east-1", "us-east-1f", "g5.xlarge", "no offer in zone us-east-1f"),
        ("tencent", "ap-guangzhou", None, "PNV4.7XLARGE116", "GN7.2XLARGE32"),
    ],
)
def test_reserved_capacity_the_catalog_does_not_know_is_a_clear_error(
    provider: str, region: str, zone: str | None, instance_type: str, message: str
) -> None:
    r = ReservedCapacity(provider=provider, region=region, zone=zone, instance_type=instance_type, count=1, until=UNTIL)
    with pytest.raises(UserError) as err:
        owned_offers([r], OFFERS)
    assert message in str(err.value)
    assert instance_type in str(err.value)


def _csv_rows() -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(BUNDLED_TEXT)))
