"""The offer book: one joined list and its key indexes per refresh, refreshed when stale, kept on errors."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

from providers.base import ProviderUnavailable
from scheduler.lifecycle.offerbook import OfferBook
from scheduler.models import Offer, Price
from scheduler.money import Money

T0 = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)


def offer(provider: str, zone: str, itype: str = "g4dn.xlarge", od: str = "1.00") -> Offer:
    return Offer(provider=provider, region="r1", zone=zone, instance_type=itype, gpu="T4", gpu_count=1,
                 gpu_mem_gib=15.0, vcpus=4, mem_gib=16,
                 on_demand=Price(per_hour=Money(amount=Decimal(od), currency="USD"), source="t",
                                 as_of=date(2026, 11, 1)))


class Listed:
    """A provider whose offers() returns what the test puts in ``offers``, counting the calls."""

    def __init__(self, offers: list[Offer]) -> None:
        self.offers_now, self.calls, self.fail = offers, 0, False

    def offers(self) -> list[Offer]:
        self.calls += 1
        if self.fail:
            raise ProviderUnavailable("down")
        return list(self.offers_now)


def test_the_joined_list_and_its_indexes_are_made_once_per_refresh() -> None:
    aws = Listed([offer("aws", "r1a"), offer("aws", "r1b")])
    tencent = Listed([offer("tencent", "r1a")])
    providers = {"tencent": tencent, "aws": aws}
    book = OfferBook(refresh_seconds=600)
    first = book.offers(providers, T0)
    assert [o.provider for o in first] == ["aws", "aws", "tencent"]  # by provider name
    assert book.offers(providers, T0 + timedelta(minutes=5)) is first  # not joined again
    assert book.find(providers, T0, "aws/r1/r1b/g4dn.xlarge") is first[1]
    assert book.find(providers, T0, "aws/r1/r1c/g4dn.xlarge") is None
    assert book.by_key(providers, T0) == {o.key: o for o in first}
    assert (aws.calls, tencent.calls) == (1, 1)

    aws.offers_now = [offer("aws", "r1c")]
    later = book.offers(providers, T0 + timedelta(minutes=10))  # stale: listed again, joined again
    assert later is not first and [o.zone for o in later] == ["r1c", "r1a"]
    assert book.find(providers, T0 + timedelta(minutes=10), "aws/r1/r1b/g4dn.xlarge") is None
    assert set(book.by_key(providers, T0 + timedelta(minutes=10))) == {o.key for o in later}


def test_a_provider_that_fails_keeps_its_last_list() -> None:
    aws = Listed([offer("aws", "r1a")])
    book = OfferBook(refresh_seconds=600)
    first = book.offers({"aws": aws}, T0)
    aws.fail = True
    assert book.offers({"aws": aws}, T0 + timedelta(hours=1)) == first
    assert book.find({"aws": aws}, T0 + timedelta(hours=1), first[0].key) is first[0]


def test_find_takes_the_first_offer_of_a_key_and_by_key_the_last() -> None:
    a, b = offer("aws", "r1a", od="1.00"), offer("aws", "r1a", od="2.00")  # one key twice (a cloud's mistake)
    book = OfferBook()
    providers = {"aws": Listed([a, b])}
    assert book.find(providers, T0, a.key) is a  # as the scan it replaced
    assert book.by_key(providers, T0)[a.key] is b  # as the dict comprehensions it replaced
