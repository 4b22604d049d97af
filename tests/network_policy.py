"""What a set of NetworkPolicies admits, evaluated as Kubernetes does, for the manifest tests.

A pod that no policy of a direction selects is open in that direction; a selected pod admits only
what some rule of a policy selecting it admits, and the rules of all those policies add up. This
handles the parts of the API deploy/ uses (matchLabels, numeric ports); anything else is refused,
so a policy that outgrows it fails its test instead of being judged wrong.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

Policy = dict[str, Any]


@dataclass(frozen=True)
class Pod:
    namespace: str
    labels: dict[str, str] = field(default_factory=dict)

    @property
    def namespace_labels(self) -> dict[str, str]:
        return {"kubernetes.io/metadata.name": self.namespace}


def matches(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    if set(selector) - {"matchLabels"}:
        raise NotImplementedError(f"tests/network_policy.py handles matchLabels only, not {selector}")
    return all(labels.get(key) == value for key, value in selector.get("matchLabels", {}).items())


def peer_matches(peer: dict[str, Any], policy_namespace: str, pod: Pod) -> bool:
    if "ipBlock" in peer:
        raise NotImplementedError(f"tests/network_policy.py does not judge ipBlock peers: {peer}")
    if "namespaceSelector" in peer:
        in_namespace = matches(peer["namespaceSelector"], pod.namespace_labels)
    else:
        in_namespace = pod.namespace == policy_namespace
    return in_namespace and matches(peer.get("podSelector", {}), pod.labels)


def port_matches(ports: list[dict[str, Any]] | None, port: int, protocol: str) -> bool:
    if not ports:
        return True
    for rule in ports:
        if not isinstance(rule.get("port", 0), int):
            raise NotImplementedError(f"tests/network_policy.py handles numeric ports only: {rule}")
        if rule.get("protocol", "TCP") == protocol and rule.get("port", port) <= port <= rule.get("endPort", rule.get("port", port)):
            return True
    return False


def policy_types(policy: Policy) -> list[str]:
    spec = policy["spec"]
    return spec.get("policyTypes") or ["Ingress", *(["Egress"] if "egress" in spec else [])]


def admits(policies: list[Policy], source: Pod, destination: Pod, port: int, protocol: str = "TCP") -> bool:
    """Whether a connection from `source` to `destination` on `port` passes both pods' policies."""
    return (_allowed(policies, "Egress", "egress", "to", subject=source, peer=destination, port=port, protocol=protocol)
            and _allowed(policies, "Ingress", "ingress", "from", subject=destination, peer=source, port=port, protocol=protocol))


def _allowed(policies: list[Policy], kind: str, rules_key: str, peers_key: str, *, subject: Pod, peer: Pod,
             port: int, protocol: str) -> bool:
    selecting = [p for p in policies if p["metadata"]["namespace"] == subject.namespace
                 and kind in policy_types(p) and matches(p["spec"]["podSelector"], subject.labels)]
    if not selecting:
        return True
    return any(
        (not rule.get(peers_key) or any(peer_matches(p, policy["metadata"]["namespace"], peer) for p in rule[peers_key]))
        and port_matches(rule.get("ports"), port, protocol)
        for policy in selecting for rule in policy["spec"].get(rules_key, [])
    )
