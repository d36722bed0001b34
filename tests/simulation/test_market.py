"""The market a trace runs in: reclaim-rate factors per market, written by the generator, used by simulate."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from providers.catalog import load_catalog
from providers.registry import build_sandbox
from scheduler.clock import SimClock
from scheduler.errors import UserError
from scheduler.jobs.jobfile import parse_job
from scheduler.settings import Settings
from scheduler.simulation.market import MarketSpec, parse_reclaim_scale
from scheduler.simulation.simulate import Submission, simulate
from scheduler.simulation.trace_file import load_trace, load_trace_market
from scheduler.simulation.traces import main

START = datetime(2026, 11, 2, 1, tzinfo=timezone.utc)


def test_the_longest_market_key_wins_and_unnamed_markets_keep_the_catalogs_rate() -> None:
    hz = next(o for o in load_catalog() if o.provider == "alibaba" and o.region == "cn-hangzhou")
    other = next(o for o in load_catalog() if o.provider == "alibaba" and o.region != "cn-hangzhou")
    aws = next(o for o in load_catalog() if o.provider == "aws")
    tencent = next(o for o in load_catalog() if o.provider == "tencent")
    spec = parse_reclaim_scale("alibaba=2, alibaba/cn-hangzhou=0.5, aws=3")
    assert spec.reclaim_factor(hz) == 0.5
    assert spec.reclaim_factor(other) == 2.0
    assert spec.reclaim_factor(aws) == 3.0
    assert spec.reclaim_factor(tencent) == 1.0
    assert parse_reclaim_scale("4").reclaim_factor(tencent) == 4.0
    assert parse_reclaim_scale("4,tencent=1").reclaim_factor(tencent) == 1.0
    assert MarketSpec().is_catalog and parse_reclaim_scale("*=1").is_catalog and not spec.is_catalog


@pytest.mark.parametrize(("text", "expected"), [
    ("", "empty"),
    ("aws=fast", "'fast' is not a number"),
    ("aws=-1", "between 0 and 50"),
    ("aws=nan", "between 0 and 50"),
    ("aws=1,aws=2", "given twice"),
    ("aws//x=2", "is not '*' nor provider"),
    ("a/b/c/d/e=2", "is not '*' nor provider"),
])
def test_a_bad_reclaim_scale_is_a_user_error_with_the_form(text: str, expected: str) -> None:
    with pytest.raises(UserError) as err:
        parse_reclaim_scale(text)
    assert expected in err.value.message and "aws=2" in (err.value.fix or "")


@pytest.mark.parametrize(("text", "expected"), [
    ("asw=2", "no offer of the catalog is in market 'asw'; did you mean 'aws'"),
    ("aws/us-eest-1=2", "did you mean 'aws/us-east-1'"),
    ("gcp=2", "no offer of the catalog is in market 'gcp'"),
])
def test_a_market_no_offer_is_in_is_refused_as_a_typo(text: str, expected: str) -> None:
    # Against the catalog: a typo would otherwise leave every rate as it was without a word.
    with pytest.raises(UserError, match=expected):
        parse_reclaim_scale(text, load_catalog())
    assert parse_reclaim_scale("aws/us-east-1=2,alibaba=0.5,*=1", load_catalog()).reclaim_scale["alibaba"] == 0.5


def test_the_market_goes_first_in_the_trace_and_loads_back(tmp_path: Path) -> None:
    out = tmp_path / "m.jsonl"
    assert main(["--seed", "3", "--teams", "1", "--scale", "0.1", "--out", str(out)]) == 0
    catalog_bytes = out.read_bytes()
    assert b'"market"' not in catalog_bytes  # the catalog's market writes no line: the same bytes as before
    scaled = tmp_path / "m2.jsonl.gz"
    assert main(["--seed", "3", "--teams", "1", "--scale", "0.1", "--reclaim-scale", "aws=2,tencent=0",
                 "--out", str(scaled)]) == 0
    entries, market = load_trace_market(scaled)
    assert market == MarketSpec(reclaim_scale={"aws": 2.0, "tencent": 0.0})
    assert entries == load_trace(out) == load_trace(scaled)  # the same jobs: only the market differs
    assert load_trace_market(out)[1].is_catalog


@pytest.mark.parametrize(("line", "expected"), [
    ('{"market": {"reclaim_scale": {"aws": -2}}}', "between 0 and 50"),
    ('{"market": {"reclaim": {"aws": 2}}}', "market: reclaim: Extra inputs"),
    ('{"market": {}, "at": "x"}', "the one key 'market'"),
])
def test_a_bad_market_line_names_the_file_and_line(tmp_path: Path, line: str, expected: str) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text("\n" + line + "\n")
    with pytest.raises(UserError) as err:
        load_trace(path)
    assert f"{path}: line 2" in err.value.message and expected in err.value.message


def test_the_sandbox_clouds_publish_the_scaled_rate() -> None:
    settings = Settings(_env_file=None, cluster="t")
    spec = parse_reclaim_scale("aws=3,alibaba=0")
    providers, _ = build_sandbox(settings, SimClock(START), catalog=spec.scaled(load_catalog()))
    catalog = {o.key: o.spot_interruptions_per_hour for o in load_catalog()}
    for name, factor in (("aws", 3.0), ("alibaba", 0.0), ("tencent", 1.0)):
        offers = providers[name].offers()
        assert offers and all(o.spot_interruptions_per_hour == pytest.approx(catalog[o.key] * factor) for o in offers)


def test_simulate_draws_reclaims_at_the_markets_rate() -> None:
    job = parse_job({"name": "long", "team": "vision-qa", "kind": "train", "model": "yolov9-c",
                     "data": {"uri": "oss://b/d", "train_images": 20000, "val_images": 500},
                     "train": {"epochs": 30, "batch": 16}, "resources": {"gpus": ["A10"]},
                     "where": {"providers": ["alibaba"], "regions": ["cn-hangzhou"]}}, "long")
    subs = [Submission(at=START, job=job, source="t:1")]
    runs = {scale: simulate(subs, policy="spot-greedy", seed=5, horizon=timedelta(days=3),
                            market=parse_reclaim_scale(scale))
            for scale in ("0", "20")}
    assert runs["0"].interruptions == 0 and runs["0"].succeeded == 1
    assert runs["20"].interruptions > 0
