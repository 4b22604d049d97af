"""What the benchmark tools for docs/performance.md make of what they collect: bench.trace_workflow's
table of one workflow's spans, bench.profile_services' shares from py-spy's collapsed stacks, and
bench.compare's reading of each engine's output and its ratios."""

from __future__ import annotations

import gc

from bench.compare import CONCURRENT, SEQUENTIAL, RunResult, summary
from bench.local import CollectionMeter
from bench.profile_services import Profile
from bench.trace_workflow import hop_table, trace_of
from kadence.dev.otlp import Span

TRACE, OTHER = "a" * 32, "b" * 32
MS = 1_000_000
T0 = 1_700_000_000_000 * MS  # the client's StartWorkflow span begins


def span(service: str, name: str, span_id: str, start_ms: float, end_ms: float, *, trace_id: str = TRACE, parent_id: str = "",
         queue_ms: int | None = None, links: tuple[str, ...] = ()) -> Span:
    attributes: dict[str, object] = {} if queue_ms is None else {"kadence.queue_ms": queue_ms}
    return Span(service, name, trace_id, span_id, parent_id, attributes, links, T0 + int(start_ms * MS), T0 + int(end_ms * MS))


def test_the_table_has_every_span_of_the_trace_and_those_linked_to_it_by_start_time() -> None:
    start = span("client+worker", "StartWorkflow:BenchWorkflow", "01", 0, 21)
    received = [  # as they come: each process exports when its spans end
        span("kadence-matching", "matching route", "03", 6.7, 16.7, parent_id="02", queue_ms=9),
        span("kadence-history", "history StartWorkflowExecution", "02", 0.5, 7.5, parent_id="01", queue_ms=6),
        span("kadence-history", "history StartWorkflowExecution", "09", 1.0, 3.0, trace_id=OTHER, queue_ms=1),
        span("kadence-visibility", "visibility apply", "04", 13.4, 20.6, trace_id=OTHER, links=("03", "99")),
        span("client+worker", "worker WorkflowTask", "05", 15.7, 22.5, parent_id="03", queue_ms=5),
    ]
    spans = trace_of([start, *received], TRACE)
    assert [s.span_id for s in spans] == ["01", "02", "03", "04", "05"], "the other trace's own span is left out; its link is kept"

    header, *rows = hop_table(spans, start.start_ns)
    assert header.split() == ["at", "ms", "took", "ms", "queued", "ms", "service", "span"]
    assert [row.split()[:2] for row in rows] == [["0.0", "21.0"], ["0.5", "7.0"], ["6.7", "10.0"], ["13.4", "7.2"], ["15.7", "6.8"]]
    assert rows[1].split()[2:] == ["6", "kadence-history", "history", "StartWorkflowExecution"]
    assert rows[3].split()[2:] == ["kadence-visibility", "visibility", "apply"], "no queue time where the span has none"


def test_profile_shares_count_each_sample_once_per_function_below_the_threads_trunk() -> None:
    collapsed = [
        "<module> (svc.py:9);main (svc.py:5);handle (svc.py:20);encode (codec.py:77) 6",
        "<module> (svc.py:9);main (svc.py:5);handle (svc.py:21);walk (tree.py:3);walk (tree.py:4) 3",
        "<module> (svc.py:9);main (svc.py:5) 1",
        "Thread._bootstrap (threading.py:1002);_worker (thread.py:81) 2",
        "Thread._bootstrap (threading.py:1002);_worker (thread.py:83);encode (codec.py:77) 4",
    ]
    profile = Profile.parse(collapsed)
    assert profile.samples == 16
    assert profile.own == {"encode (codec.py:77)": 10, "walk (tree.py:4)": 3, "_worker (thread.py:81)": 2, "main (svc.py:5)": 1}
    # <module> and main are on every stack of the main thread, Thread._bootstrap and _worker on every
    # one of the other: their trunks. walk recursing counts its samples once.
    assert profile.inclusive == {"handle (svc.py)": 9, "encode (codec.py)": 10, "walk (tree.py)": 3}
    assert profile.report()[1] == "     62.5%  encode (codec.py:77)"


def test_the_collection_meter_counts_full_collections_between_start_and_report() -> None:
    meter = CollectionMeter()
    meter.start()
    held = [[index] for index in range(100_000)]  # something for the collection to walk
    gc.collect()
    report = meter.report(1000)
    counted = meter.full  # the one asked for, and any the allocations above set off
    assert counted >= 1 and meter.cpu_s > 0 and len(held) == 100_000
    assert report.startswith("client's collections:") and f"{counted} of the oldest generation" in report
    gc.collect()
    assert meter.full == counted, "the meter stops counting at its report"


# What each engine's client prints (the peers' scripts in ../shared/peers/, and bench.compare's own for Kadence).
PEER_OUTPUTS = {
    "dbos": "launch took 1.20s\nsequential[sync]: n=200 p50=10.71ms p99=14.02ms mean=10.90ms\n"
            "concurrent[sync/threads]: n=2000 start_all=3.10s total=9.80s throughput=204 wf/s\n",
    "restate": "sequential[wf]: n=200 p50=5.20ms p99=8.30ms mean=5.60ms\n"
               "concurrent[wf, conn_limit=500]: n=2000 total=3.20s throughput=625 wf/s\n",
    "temporal": "hello-world result: 0\nsequential[sandbox=1]: n=200 p50=100.00ms p99=144.10ms mean=101.00ms\n"
                "concurrent[sandbox=1]: n=2000 start_all=20.00s total=100.00s throughput=20 wf/s\n",
    "kadence": "sequential[kadence]: n=200 p50=19.40ms p99=47.10ms mean=21.00ms\n"
               "concurrent[kadence]: n=2000 total=8.00s throughput=250 wf/s\n",
}


def test_compare_reads_every_engines_output() -> None:
    read = {}
    for engine, text in PEER_OUTPUTS.items():
        sequential, concurrent = SEQUENTIAL.search(text), CONCURRENT.search(text)
        assert sequential is not None and concurrent is not None, engine
        read[engine] = (float(sequential[1]), float(sequential[2]), int(concurrent[1]))
    assert read == {"dbos": (10.71, 14.02, 204), "restate": (5.2, 8.3, 625), "temporal": (100.0, 144.1, 20), "kadence": (19.4, 47.1, 250)}


def test_compare_puts_kadence_beside_each_peer_run_for_run() -> None:
    results = [
        RunResult("kadence", "fresh", 40.0, 80.0, 100, {"broker": 20.0, "server": 10.0}, 1000),
        RunResult("kadence", "steady", 20.0, 40.0, 200, {"broker": 5.0, "server": 5.0}, 1000),
        RunResult("restate", "fresh", 10.0, 20.0, 400, {"restate-server": 5.0}, 1000),
        RunResult("restate", "steady", 5.0, 10.0, 500, {"restate-server": 5.0}, 1000),
    ]
    assert summary(results).splitlines() == [
        "fresh  kadence/restate : p50 4.00 times, rate 0.25 of theirs, CPU a workflow 6.00 times",
        "steady kadence/restate : p50 4.00 times, rate 0.40 of theirs, CPU a workflow 2.00 times",
    ]
