"""The jobs' output in the store: each batch stored once, the oldest lines dropped past the limit, read
from any position with what was missed counted; and the cleaning both sides of the wire agree on."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from sqlalchemy import func, select

from scheduler.clock import SimClock
from scheduler.jobs.jobfile import parse_job
from scheduler.jobs.output_text import MAX_LINE_CHARS, clean_line, clean_lines, utf8_size
from scheduler.lifecycle import service
from scheduler.lifecycle.job_logs import PIECE_BYTES, append_lines, append_output, output_end, read_output
from scheduler.store.database import Store
from scheduler.store.tables import JobLogRow, JobRow
from tests.agent.machines import put_on_machine

NOW = datetime(2026, 11, 2, 9, 0, tzinfo=timezone.utc)
JOB = {"name": "helmet-v3", "team": "vision-qa", "kind": "train", "model": "yolov9-s",
       "data": {"uri": "s3://bucket/datasets/helmet", "train_images": 12000}, "train": {"epochs": 100}}
LIMIT = 1 << 20


@pytest.fixture
def job_id(store: Store, sim_clock: SimClock) -> str:
    job = service.submit(store, sim_clock, parse_job(JOB, "job.yaml"), source="job.yaml")
    put_on_machine(store, sim_clock, job.id)
    return job.id


def lines(first: int, last: int, width: int = 0) -> str:
    return "".join(f"line {n}{'.' * width}\n" for n in range(first, last + 1))


def append(store: Store, job_id: str, start: int, text: str, limit: int = LIMIT) -> int:
    with store.session() as s:
        return append_output(s, job_id, 1, start, text, NOW, limit=limit)


def read(store: Store, job_id: str, offset: int = 0, attempt: int | None = 1, **kw):
    with store.session(write=False) as s:
        job = s.get(JobRow, job_id)
        return read_output(s, job, attempt, offset, limit=kw.pop("limit", LIMIT), **kw)


def rows(store: Store) -> int:
    with store.session(write=False) as s:
        return s.scalar(select(func.count()).select_from(JobLogRow))


# --- cleaning: what a terminal would show, the same bytes on both sides


@pytest.mark.parametrize(("raw", "kept"), [
    ("plain text", "plain text"),
    ("\r  1/10 [=>   ]\r  5/10 [===> ]\r 10/10 [=====]", " 10/10 [=====]"),  # tqdm redraws in place
    ("windows line\r", "windows line"),
    ("\x1b[34m\x1b[1mtrain: \x1b[0mScanning", "train: Scanning"),  # YOLOv9's colorstr
    ("\x1b]0;title\x07after", "after"),
    ("nul\x00bell\x07del\x7f", "nul bell del "),
    ("tab\tkept", "tab\tkept"),
    ("rtl \u202eoverride", "rtl  override"),
    ("中文 ok", "中文 ok"),
])
def test_a_line_keeps_what_a_terminal_would_show(raw: str, kept: str) -> None:
    assert clean_line(raw) == kept
    assert clean_line(clean_line(raw)) == clean_line(raw)  # idempotent: the daemon cleans again


def test_a_very_long_line_is_cut_once() -> None:
    cut = clean_line("x" * (3 * MAX_LINE_CHARS))
    assert len(cut) == MAX_LINE_CHARS and cut.endswith("…")
    assert clean_line(cut) == cut


def test_clean_lines_ends_every_line() -> None:
    assert clean_lines("a\nb") == "a\nb\n"
    assert clean_lines("a\n\nb\n") == "a\n\nb\n"
    assert clean_lines("") == ""


# --- storing


def test_batches_in_order_read_back_whole(store: Store, job_id: str) -> None:
    end = append(store, job_id, 0, lines(1, 3))
    end = append(store, job_id, end, lines(4, 6))
    page = read(store, job_id)
    assert page.text == lines(1, 6)
    assert (page.offset, page.next_offset, page.end, page.dropped) == (0, end, end, 0)
    assert page.attempt == 1 and page.attempts == [1] and not page.done


def test_a_batch_sent_again_is_stored_once(store: Store, job_id: str) -> None:
    end = append(store, job_id, 0, lines(1, 3))
    assert append(store, job_id, 0, lines(1, 3)) == end  # its answer was lost: sent again, the same
    end2 = append(store, job_id, 0, lines(1, 5))  # an agent that restarted reads its log from the top
    assert read(store, job_id).text == lines(1, 5)
    assert end2 == utf8_size(lines(1, 5))


def test_a_batch_past_the_end_leaves_a_gap_that_readers_are_told_about(store: Store, job_id: str) -> None:
    end = append(store, job_id, 0, lines(1, 2))
    append(store, job_id, end + 100, lines(9, 9))
    first = read(store, job_id)
    assert first.text == lines(1, 2) and first.next_offset == end
    second = read(store, job_id, first.next_offset)
    assert second.text == lines(9, 9) and second.dropped == 100


def test_small_batches_share_rows(store: Store, job_id: str) -> None:
    end = 0
    for n in range(200):
        end = append(store, job_id, end, lines(n, n))
    assert rows(store) <= 1 + end // PIECE_BYTES
    assert read(store, job_id).text == lines(0, 199)


def test_past_the_limit_the_oldest_lines_go_and_the_reader_is_told(store: Store, job_id: str) -> None:
    limit = 8 * 1024
    end = 0
    for n in range(0, 1000, 10):  # ~40 KiB in all, in batches of 10 lines
        end = append(store, job_id, end, lines(n, n + 9, width=30), limit=limit)
    page = read(store, job_id, limit=limit)
    kept = utf8_size(page.text)
    assert 0 < kept <= limit and page.end == end == page.next_offset
    assert page.dropped == page.offset == end - kept > 0
    assert page.text.endswith(lines(999, 999, width=30)) and page.text.startswith("line ")  # whole lines
    assert page.limit_bytes == limit


def test_one_batch_over_the_limit_keeps_its_last_whole_lines(store: Store, job_id: str) -> None:
    limit = 4096
    end = append(store, job_id, 0, lines(1, 500), limit=limit)
    page = read(store, job_id, limit=limit)
    assert utf8_size(page.text) <= limit and page.text.endswith(lines(500, 500))
    assert page.text.startswith("line ") and page.end == end and page.dropped == end - utf8_size(page.text)


def test_reading_from_an_offset_and_in_pages(store: Store, job_id: str) -> None:
    end = 0
    for n in range(0, 300, 10):
        end = append(store, job_id, end, lines(n, n + 9, width=60))
    text, offset = "", 0
    while True:
        page = read(store, job_id, offset, max_bytes=2000)
        assert utf8_size(page.text) <= 2000 + PIECE_BYTES
        text += page.text
        offset = page.next_offset
        if offset >= page.end:
            break
    assert text == lines(0, 299, width=60)


def test_the_simulated_agents_writer_appends_at_the_end(store: Store, job_id: str) -> None:
    with store.session() as s:
        append_lines(s, job_id, 1, "one\n", NOW, limit=LIMIT)
        append_lines(s, job_id, 1, "two\n", NOW, limit=LIMIT)
        assert output_end(s, job_id, 1) == 8
    assert read(store, job_id).text == "one\ntwo\n"


def test_an_attempt_the_job_never_had(store: Store, job_id: str) -> None:
    with pytest.raises(LookupError):
        read(store, job_id, attempt=2)
    with pytest.raises(service.NotFoundError, match="has no attempt 2") as exc:
        service.job_logs(store, job_id, 2, limit=LIMIT)
    assert "its attempts: 1" in (exc.value.fix or "")


def test_a_job_that_never_ran_has_no_attempt(store: Store, sim_clock: SimClock) -> None:
    job = service.submit(store, sim_clock, parse_job(JOB, "job.yaml"), source="job.yaml")
    page = service.job_logs(store, job.id, limit=LIMIT)
    assert page.attempt is None and page.attempts == [] and page.text == "" and not page.done
