"""The floor of one hop: a record relayed by the services' own Kafka plumbing, at each producer linger.

    python -m bench.bench_hop [--lingers 0,1,5] [--records 300] [--broker kafka|tansu]

A workflow's latency is its hops: a record produced, consumed by a service, and the next record
produced. This takes that path with nothing else in it: a sender produces to topic A with
`AsyncProducer`; a relay in the same process consumes A with `consume_batches` (the poll thread
and hand-off every service uses) and produces each record to topic B with its own
`AsyncProducer`; a plain consumer waits for it on B. It prints, per linger.ms, the p50 and p90 of
those two legs, one record at a time, beside the broker's own produce-to-consume round trip.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import tempfile
import time
import uuid
from pathlib import Path

import uvloop
from confluent_kafka import Consumer, TopicPartition

from bench.bench_workflows import broker_round_trip, percentile
from bench.local import add_broker_option, describe_broker
from kadence.dev.local_stack import LocalStack
from kadence.protocol.kafka import AsyncProducer, base_config, consume_batches, ensure_topics, make_consumer
from kadence.protocol.settings import KafkaSettings


async def two_legs(settings: KafkaSettings, records: int) -> list[float]:
    """Milliseconds from producing to A until the relayed record is read from B, one at a time."""
    source, target = (f"kadence.bench.hop.{uuid.uuid4().hex[:8]}" for _ in range(2))
    ensure_topics(settings, {source: 1, target: 1})
    relay_out, sender = AsyncProducer(settings), AsyncProducer(settings)
    relay_in = make_consumer(settings, f"kadence.bench-hop-{source}")
    relay_in.assign([TopicPartition(source, 0, 0)])
    end = Consumer({**base_config(settings), "group.id": "kadence.bench-hop", "fetch.wait.max.ms": settings.fetch_wait_max_ms})
    end.assign([TopicPartition(target, 0, 0)])
    stop = asyncio.Event()

    async def relay() -> None:
        async for messages in consume_batches(relay_in, stop):
            for msg in messages:
                relay_out.produce(target, msg.value() or b"", msg.key())

    relaying = asyncio.create_task(relay())
    loop = asyncio.get_running_loop()
    samples = []
    try:
        for i in range(records + 20):  # the first 20: connections and metadata
            sent = time.perf_counter()  # uvloop's loop.time() counts whole milliseconds
            sender.produce(source, str(i).encode(), b"hop")
            while (msg := await loop.run_in_executor(None, end.poll, 1.0)) is None or msg.error():
                pass
            if i >= 20:
                samples.append((time.perf_counter() - sent) * 1000)
    finally:
        stop.set()
        await relaying
        sender.close()
        relay_out.close()
        end.close()
        relay_in.close()
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lingers", default="0,1,5", help="linger.ms values to measure, comma-separated")
    parser.add_argument("--records", type=int, default=300)
    add_broker_option(parser)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    with tempfile.TemporaryDirectory(prefix="kadence-bench-") as data_dir:
        stack = LocalStack(Path(data_dir), partitions=1, broker_kind=args.broker)
        stack.start(services=())
        try:
            print(describe_broker(stack))
            for linger in (int(value) for value in args.lingers.split(",")):
                legs = uvloop.run(two_legs(dataclasses.replace(stack.settings, linger_ms=linger), args.records))
                print(f"linger.ms {linger:>3}: two legs through one relay p50 {percentile(legs, 50):.2f} ms, "
                      f"p90 {percentile(legs, 90):.2f} ms ({args.records} records)")
            round_trip = broker_round_trip(stack.settings, args.records)
            print(f"broker round trip:  p50 {percentile(round_trip, 50):.2f} ms, p90 {percentile(round_trip, 90):.2f} ms")
        finally:
            stack.stop()


if __name__ == "__main__":
    main()
