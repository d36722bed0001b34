"""The planner's order made lazily, for ``planner.plan``: one job's candidates in a heap, best first.

``Ranking`` merges the members of the groups a ``rank.Scorer`` scores with a heap into
the planner's order (``rank.SortKey``: ``planner.rank``'s text spells it out), lazily:
a decision needs the best few only. ``ranking`` makes one for a job and a filter; the
heap holds an ``Entry`` per line of candidates and a ``Placeholder`` per bundle not
reached yet.

Laziness: a bundle of new machines (the groups that share a timing) enters the
heap as one ``Placeholder``, floored from the estimate's hours in float arithmetic
(``_floor_cents``: no cost for a bundle never reached; spot's with its
reclaims' restarts added), and is timed and priced group by group only when the
ranking reaches it (``Ranking._expand``); most bundles of most jobs never are.
What ``ranking`` reads of a bundle is read once per call (``CandidateBook.rows``).
Only the few candidates a decision shows get a full ``rank.Scored`` (new machines for
a job that avoids nothing rank from their cost alone, ``_add_entries``).
A refusal at a deadline screens the timings by their ``Timing.needed`` worked out
in floats (``Ranking.needs``), makes only those that may be the fastest, and costs
only the cheapest groups of their bundles (``Ranking.fastest``).

Everything here lives for one ``plan()`` call: no module-level state.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterator, Sequence
from typing import Literal, NamedTuple, final

from scheduler.models import Capacity
from scheduler.planner.book import Group, Line, Link, Member, Rank, Rows, Tail, Timed
from scheduler.planner.rank import _SCREEN_ERROR, _SCREEN_MAX, Pick, Prefix, Scored, Scorer, Timing

_new = tuple.__new__  # ``_new(Entry, (...))`` is ``Entry(...)`` without NamedTuple's Python-level ``__new__``:
# the hot loops below make a heap entry per line of candidates, tens of thousands a call.

# Enum members read once: looking one up on its class costs ~0.2 us, and the hot paths below ask often.
_SPOT = Capacity.spot
_FEASIBLE, _BLOCKED = Rank.FEASIBLE, Rank.BLOCKED


class Entry(NamedTuple):
    """A line of candidates in a ranking's heap, keyed by its member at ``pos`` (a ``SortKey``, then
    ``pos``). Members' tails differ, so two entries never tie on the key, and neither does an entry and
    a ``Placeholder``; the fields after ``pos`` are never compared."""

    rank: Rank
    prefix: Prefix
    tail: Tail  # of the member at ``pos``
    pos: int  # into the list walked (``Line.members``, or ``Line.firsts`` for runners-up); 0 in the heap
    line: Line
    group: Group
    timing: Timing


# A placeholder's prefix, (not_reserved, cents): True (new machines) and a whole number of cents at or below
# the cheapest group's cost on the estimate's hours, which reclaims only add to (``_floor_cents``). No
# candidate of its bundle sorts before it: at an equal number of cents it still sorts first, as a tuple
# sorts before the longer ones it begins. (A plain tuple: nothing reads its fields, and the heap gets one
# per bundle.)
Floor = tuple[bool, int]


def _floor_cents(hourly: float, hours: float) -> int:
    """Cents at or below ``cost.expected_cost`` of a price and hours, from their floats, without a Decimal.

    The exact cost is the price x ``Decimal(repr(hours))`` rounded to the cent, at or above the whole cents
    below the product. ``hourly`` and ``hours`` are the floats nearest those, so the float product (x 100) is
    within 1e-15 of the exact one, relatively: 1e-12 less is below it, and so are its whole cents. A
    placeholder only needs a lower bound (it is expanded a little early at worst), and most never are."""
    return _math_floor(hourly * hours * _CENTS_UNDER)


_CENTS_UNDER = 100.0 * (1 - 1e-12)  # x 100 (cents), less 1e-12 (``_floor_cents``)
_math_floor = math.floor


@final  # never subclassed: ``type(x) is Placeholder`` tells it from an ``Entry`` (and lets mypy narrow both ways)
class Placeholder(NamedTuple):
    """A bundle of new machines (groups sharing a timing) for one job, not timed nor costed until the ranking
    reaches it (``Ranking._expand``): most decisions show a few cheap bundles, and never read the others'
    numbers.

    It sorts before every candidate of its bundle: the rank they can have at best and whole cents at or below
    the cheapest group's cost (``CandidateBook.matching`` sorts a bundle by price) on the estimate's hours,
    which reclaims only add to (``_floor_cents``); each step of ``cost.expected_cost`` keeps that order. A
    floor below a candidate's cost only expands the bundle earlier: the order of candidates is the same. Its
    order is negative, below every ``Entry.pos``, and distinct per placeholder, so keys never tie and
    ``bundle`` is never compared.
    """

    rank: Rank  # the best its candidates can have: FEASIBLE, or BLOCKED once the deadline has passed
    prefix: Floor
    tail: tuple[()]
    order: int  # -1 - the bundle's first group's index
    bundle: list[Group]
    chain: list[Link]  # the bundle's chain (``ranking``): the next link enters the heap when this one leaves it
    next: int  # the next link's index in ``chain``
    hours: float  # the estimate's hours for the chain's setup


class Ranking:
    """The candidates one filter lets through, best first; a group is scored in full when a caller needs it.

    The heap holds an ``Entry`` per line of candidates, and a ``Placeholder`` per bundle not reached yet.
    Nothing here refers back to the ranking: no reference cycles for the collector to find.
    """

    __slots__ = ("scorer", "_matching", "_timed", "_bundles", "_heap", "_expanded")  # one a job

    def __init__(self, scorer: Scorer, matching: list[list[Group]], timings: list[Timed],
                 heap: list[Entry | Placeholder]) -> None:
        self.scorer = scorer
        self._matching, self._timed = matching, timings  # the bundles; by timing (``CandidateBook.rows``)
        self._bundles: list[tuple[Timing, list[Group]]] | None = None
        self._heap = heap  # heapified
        # Placeholder.order -> its bundle's entries, and the placeholder of the next link of its chain
        self._expanded: dict[int, list[Entry | Placeholder]] = {}

    def _expand(self, p: Placeholder) -> list[Entry | Placeholder]:
        """A placeholder's candidates: its bundle timed, and its groups' heap entries; then the next bundle of
        its chain, as a placeholder (made once)."""
        entries = self._expanded.get(p.order)
        if entries is None:
            entries = self._expanded[p.order] = []
            sc = self.scorer
            _add_entries(sc, entries, p.bundle, sc.timing(p.bundle[0]))
            chain, i = p.chain, p.next
            if i < len(chain):
                hourly, order, bundle = chain[i]
                entries.append(_new(Placeholder, (p.rank, (True, _math_floor(hourly * p.hours * _CENTS_UNDER)), (),
                                                  order, bundle, chain, i + 1, p.hours)))
        return entries

    def _settle(self, heap: list[Entry | Placeholder]) -> None:
        """Expand placeholders at the top of ``heap`` until a candidate's line is there (or nothing is)."""
        while heap and type(top := heap[0]) is Placeholder:
            entries = self._expand(top)  # never empty: a bundle has groups, and a group members
            heapq.heapreplace(heap, entries[0])  # pops top
            for k in range(1, len(entries)):
                heapq.heappush(heap, entries[k])

    @property
    def bundles(self) -> list[tuple[Timing, list[Group]]]:
        """Per timing: the groups that share it (every bundle timed)."""
        if self._bundles is None:
            timing, timings, by_gpu = self.scorer.timing, self.scorer._timings, self.scorer._by_gpu
            self._bundles = [(timings.get(groups[0].timing_keys[by_gpu]) or timing(groups[0]), groups)
                             for groups in self._matching]
        return self._bundles

    def needs(self, stretch: float) -> list[tuple[float, Timed]]:
        """For a job with a deadline, per timing it can run on that may be the fastest: its ``Timing.needed``
        in hours after now as floats compute it, and the timing's ``Timed`` (``plan._soonest`` makes those
        within ``need_tolerance`` of the least). ``stretch``: 1 / (1 - deadline_safety).

        Off spot, the finish is the start plus the estimate's hours, stretched. On spot, interruptions only
        add to the hours and the bad case has at least one restart more, so spot's is at least the larger of
        the same stretched (its setup's off spot) and the start plus the hours plus ``restart_hours``: a spot
        timing whose bound is past what the others allow is left out without working out its interruptions."""
        sc = self.scorer
        base_of, restart = sc._base, sc._restart_hours
        out: list[tuple[float, Timed]] = []
        spot: list[tuple[float, float, Timed]] = []
        least = math.inf
        for timed in self._timed:
            key, start, on_spot = timed[:3]  # ``start``: as rank.Scorer._time's
            base = base_of.get(key, False)
            if base is False:
                base = sc._fit_hours(timed.group, key)
            if base is None:
                continue  # the job cannot run there
            if on_spot:
                spot.append((max((start + base) * stretch, start + (base + restart)), base, timed))
            else:
                need = (start + base) * stretch
                out.append((need, timed))
                if need < least:
                    least = need
        cutoff = least + need_tolerance(least, stretch)
        for bound, base, timed in spot:
            if bound <= cutoff:
                out.append((sc.spot_need_hours(timed.group, base, timed.start, stretch), timed))
        return out

    @property
    def scored(self) -> list[Scored]:
        """Every group, scored in full."""
        return [self.scorer.scored(g, t) for t, groups in self.bundles for g in groups]

    def _walk(self) -> list[Entry | Placeholder]:
        """A copy of the heap to walk, a candidate on top."""
        self._settle(self._heap)  # the same candidates: placeholders at the top expanded for every walk
        return self._heap[:]

    def picks(self) -> Iterator[Pick]:
        """Every candidate, best first (a fresh iteration each call)."""
        heap, sc = self._walk(), self.scorer
        while heap:
            # _walk, then _settle, leave a line on top (no ``cast``: a call each candidate walked)
            r, prefix, _, i, line, g, t = heap[0]  # type: ignore[misc]
            ms = line.members
            yield _new(Pick, (sc.scored(g, t, prefix), ms[i], r))
            i += 1
            if i < len(ms):
                heapq.heapreplace(heap, _new(Entry, (r, prefix, ms[i].tail, i, line, g, t)))
            else:
                heapq.heappop(heap)
            self._settle(heap)

    def distinct(self, seen: set[int], limit: int) -> list[Pick]:
        """The best ``limit`` candidates, skipping any whose ``Member.shape`` is in ``seen``; adds theirs.
        (The runners-up: one per cloud, region, type and capacity, as other zones of a type add nothing.)

        Only the first member of each shape in a line can come out (the others' shape is seen by
        then), so the walk takes ``Line.firsts``.
        """
        if limit <= 0:
            return []
        heap, out, sc = self._walk(), [], self.scorer
        while heap:
            # _walk, then _settle below, leave a line on top (no ``cast``: a call each candidate walked)
            r, prefix, _, i, line, g, t = heap[0]  # type: ignore[misc]
            ms = line.firsts
            if ms[i].shape not in seen:
                seen.add(ms[i].shape)
                out.append(_new(Pick, (sc.scored(g, t, prefix), ms[i], r)))
                if len(out) == limit:
                    break
            i += 1
            while i < len(ms) and ms[i].shape in seen:  # its shape came out of another line
                i += 1
            if i < len(ms):
                heapq.heapreplace(heap, _new(Entry, (r, prefix, ms[i].tail, i, line, g, t)))
            else:
                heapq.heappop(heap)
            if heap and type(heap[0]) is Placeholder:
                self._settle(heap)
        return out

    def fastest(self, fastest: list[tuple[Timing, Timed]]) -> tuple[Group, Member, Timing]:
        """The best candidate of the timings ``fastest`` (made, and late: ``plan._soonest``'s): its group, member
        and timing.

        Every line of a late timing is BLOCKED whatever it costs, and a bundle's costs never fall, so the
        best is among each bundle's cheapest groups (``_add_cheapest_late``). Bundles are taken by
        a floor of their cost (``_floor_cents`` of the timing's hours), cheapest first, and only while that
        floor is not past the best found, so most are never costed."""
        sc = self.scorer
        nodes, hourly_f = sc._nodes, sc.book.hourly_f
        floors: list[tuple[bool, int, int, list[Group], Timing]] = []
        for t, timed in fastest:
            assert t.late is not None and t.est_blocker is None
            for bundle in timed.bundles:
                g = bundle[0]
                floors.append((g.not_reserved, _math_floor(hourly_f(g, nodes) * t.hours * _CENTS_UNDER), g.index,
                               bundle, t))
        floors.sort()  # (a group's index is its own: nothing after it is compared)
        top: Entry | None = None
        found: list[Entry] = []
        for not_reserved, cents, _, bundle, t in floors:
            if top is not None and (not_reserved, cents) > top.prefix[:2]:
                break  # its candidates, and those of the bundles after it, sort after the best found
            found.clear()
            _add_cheapest_late(sc, found, bundle, t)
            head = min(found)
            if top is None or head < top:
                top = head
        assert top is not None  # a refusal reads only which it is (no ``Scored``)
        return top.group, top.line.members[0], top.timing

    def first(self) -> Pick | None:
        self._settle(self._heap)
        if not self._heap:
            return None
        r, prefix, _, _, line, g, t = self._heap[0]  # type: ignore[misc]  # settled: a candidate's line on top
        return _new(Pick, (self.scorer.scored(g, t, prefix), line.members[0], r))


# --- building a ranking --------------------------------------------------------------


def ranking(sc: Scorer, rows: Rows) -> Ranking:
    """Every candidate a filter lets through for ``sc``'s job (``rows``: ``CandidateBook.rows`` of that filter for
    the job's nodes and kind), in a heap; most groups get no ``Scored`` (see
    ``_enter``), and a bundle of new machines enters as one ``Placeholder`` when the ranking nears it.

    The bundles of new machines of one setup (est key: the same estimated hours) form a chain, by their
    first group's price (``book.Link.hourly``: on spot with a floor of its reclaims' restarts, ``cost.on_spot``'s
    n x restart_hours, which lost work only adds to), the same for every job of a kind and filter: their
    floors (``_floor_cents`` of that price and the estimate's hours) never fall along it. Only a chain's first
    bundle enters the heap; each enters when the one before it leaves (``Ranking._expand``), so every bundle
    not in the heap sorts after one that is, and the ranking is the same; most bundles of most jobs never
    enter. An avoiding job, a setup the job cannot run on and fleet slots enter in full."""
    heap: list[Entry | Placeholder]
    matching, every, timings, chains, slots = rows
    heap = []
    if sc.job.avoid:  # an avoiding job scores every group in full (``Scored.avoided``)
        for row in every:
            _enter_bundle(sc, row.bundle, heap)
        heapq.heapify(heap)
        return Ranking(sc, matching, timings, heap)
    base = sc._base
    best = _BLOCKED if sc.past_deadline else _FEASIBLE  # the best rank a placeholder's candidates have
    for key, chain in chains:
        hours: float | Literal[False] | None = base.get(key, False)
        if hours is False:
            hours = sc._fit_hours(chain[0].bundle[0], key)
        if hours is None:
            for link in chain:
                _enter_bundle(sc, link.bundle, heap)
            continue
        hourly, order, bundle = chain[0]
        heap.append(_new(Placeholder, (best, (True, _math_floor(hourly * hours * _CENTS_UNDER)), (), order, bundle,
                                       chain, 1, hours)))  # ``_floor_cents``, inline
    for row in slots:
        _enter_bundle(sc, row.bundle, heap)
    heapq.heapify(heap)
    return Ranking(sc, matching, timings, heap)


def _enter_bundle(sc: Scorer, bundle: list[Group], heap: list[Entry | Placeholder]) -> None:
    t = sc.timing(bundle[0])
    for g in bundle:
        _enter(sc, g, t, heap)


def _enter(sc: Scorer, g: Group, t: Timing, heap: list[Entry | Placeholder]) -> None:
    """Add an ``Entry`` per line of ``g``'s candidates to ``heap``.

    The hot loop of planning. A new machine for a job that avoids nothing (nearly every group) needs
    only its cost and the rank ``Scored._runs`` would give it; a ``Scored`` is made later for the few
    candidates a decision shows. Fleet slots and avoiding jobs score in full.
    """
    s = sc._scored.get(g.index)
    if s is None and g.slot is None and not sc.job.avoid:
        _add_entries(sc, heap, (g,), t)
        return
    s = s or sc.scored(g, t)
    for r, line in s.runs:
        heap.append(_new(Entry, (r, s.prefix, line.members[0].tail, 0, line, g, t)))


def _add_entries(sc: Scorer, out: list[Entry] | list[Entry | Placeholder], groups: Sequence[Group],
                 t: Timing) -> None:
    """The heap entries of new machines for a job that avoids nothing, ``groups`` sharing ``t``: the
    rank ``Scored._runs`` would give each line follows from the timing and the cost alone. One loop
    for a bundle, as this runs for every group a ranking reaches."""
    blocked, late, budget = t.est_blocker is not None, t.late is not None, sc._budget
    # A stint with a move (``Timing.leg``) is costed by ``Scorer.exact_cost``'s formula: NaN hours fail the screen
    # below, which sends every group of the bundle there, with no test in the loop for the others.
    hours, nodes, finish = t.hours * 100.0 if t.leg is None else math.nan, sc._nodes, t.finish
    hourly_f = sc.book.hourly_f
    for g in groups:
        v = (g.hourly_f.get(nodes) or hourly_f(g, nodes)) * hours  # ``Scorer.cents`` (``rank.float_cents``), inline
        if 0.0 < v < _SCREEN_MAX:
            cents = int(v + 0.5)
            m = 0.5 - _SCREEN_ERROR * v
            if not -m < v - cents < m:
                cents = sc.exact_cents(g, t)
        else:
            cents = sc.exact_cents(g, t)
        if blocked:
            runs = g.runs.cannot_run
        elif late or (budget is not None and sc.over_budget(g, t, cents)):
            runs = g.runs.blocked  # late or over budget (a new machine has no reservation to outlast)
        else:
            runs = g.runs.open
        prefix = _new(Prefix, (g.not_reserved, cents, g.not_warm, finish, g.provider, g.region))  # as _score's
        for r, line in runs:
            out.append(_new(Entry, (r, prefix, line.members[0].tail, 0, line, g, t)))


def _add_cheapest_late(sc: Scorer, out: list[Entry], groups: Sequence[Group], t: Timing) -> None:
    """The entries ``_add_entries`` would add for the groups of a bundle that can hold its best
    candidate, when its timing ``t`` is late: then every line of it is BLOCKED whatever it costs, and
    ``groups`` (a bundle, sorted by price) have costs that never fall, so only the groups at the
    first one's cost can come first (the rest of the key breaks ties among them). A refusal past the
    deadline looks for the fastest option this way without costing every group of its bundle."""
    finish, cheapest = t.finish, None
    for g in groups:
        cents = sc.cents(g, t)
        if cheapest is None:
            cheapest = cents
        elif cents > cheapest:
            break
        prefix = _new(Prefix, (g.not_reserved, cents, g.not_warm, finish, g.provider, g.region))  # as _score's
        for r, line in g.runs.blocked:
            out.append(_new(Entry, (r, prefix, line.members[0].tail, 0, line, g, t)))


def need_tolerance(hours: float, stretch: float) -> float:
    """How far a float ``needed`` (``Ranking.needs``, hours after now) may be from ``Timing.needed``, twice
    over, with room to spare; ``stretch``: 1 / (1 - deadline_safety). ``needed`` rounds to the microsecond
    (2.8e-10 h) where it starts, finishes and after the division by 1 - safety, which stretches the error
    before it; the floats err by a few parts in 1e16. The bound here is 36 microseconds x (1 + stretch),
    plus a part in 1e12 (``test_fast_paths`` finds the errors under a tenth of it)."""
    return 1e-8 * (1 + stretch) + 1e-12 * abs(hours)
