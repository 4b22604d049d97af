"""The local stack's listening ports are picked below the kernel's ephemeral range, which it also
hands to outgoing connections: a port picked there could become a client's source port before
the service that was given it binds it."""

from __future__ import annotations

import socket

from kadence.dev.brokers.process import EPHEMERAL_RANGE, LISTEN_PORTS_FROM, free_ports


def test_free_ports_are_distinct_bindable_and_below_the_ephemeral_range() -> None:
    first_ephemeral = int(EPHEMERAL_RANGE.read_text().split()[0])
    ports = free_ports(20)
    assert len(set(ports)) == 20
    assert all(LISTEN_PORTS_FROM <= port < first_ephemeral for port in ports)
    for port in ports:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


def test_a_port_another_listener_holds_is_not_picked() -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", free_ports(1)[0]))
        held.listen()
        assert held.getsockname()[1] not in free_ports(200, taken=frozenset())
