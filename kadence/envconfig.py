"""Client settings from a TOML file of profiles and the environment (as temporalio.envconfig):
`await Client.connect(**ClientConfig.load_client_connect_config())`.

The file is KADENCE_CONFIG_FILE, else `$XDG_CONFIG_HOME/kadence/kadence.toml` (`~/.config/...`);
the profile is KADENCE_PROFILE, else "default". A profile holds Kadence's connection settings,
which the environment's KADENCE_* variables override, as they would without a file:

    [profile.default]
    bootstrap_servers = "127.0.0.1:9092"            # KADENCE_BOOTSTRAP_SERVERS
    postgres_dsn = "postgresql://kadence@localhost/kadence"   # KADENCE_POSTGRES_DSN

    [profile.prod]
    bootstrap_servers = "kafka-1:9093,kafka-2:9093"
    postgres_dsn = "postgresql://kadence@db/kadence"
    [profile.prod.kafka]                            # librdkafka properties; KADENCE_KAFKA_* override them
    security.protocol = "SASL_SSL"
    sasl.mechanism = "SCRAM-SHA-512"
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

from kadence.protocol.settings import kafka_properties

DataSource = Path | str | bytes  # a file's path, or its contents (str or bytes)

DEFAULT_PROFILE = "default"
_KEYS = {"bootstrap_servers", "postgres_dsn", "namespace", "kafka"}
# temporalio's keys, which name a Temporal frontend: a ported file must say Kadence's instead.
_TEMPORAL_KEYS = {
    "address": "bootstrap_servers (the Kafka brokers) and postgres_dsn (the read model)",
    "api_key": "the broker's credentials in [profile.<name>.kafka] (sasl.username, sasl.password)",
    "tls": "the broker's TLS settings in [profile.<name>.kafka] (security.protocol = \"SSL\", ssl.ca.location ...)",
    "grpc_meta": "nothing: Kadence has no RPC",
}


class ClientConnectConfig(TypedDict, total=False):
    """Keyword arguments of `Client.connect` that a profile sets."""

    bootstrap_servers: str
    postgres_dsn: str
    namespace: str
    kafka_config: Mapping[str, str]


@dataclass(frozen=True)
class ClientConfigProfile:
    """One profile, as a file and the environment set it."""

    bootstrap_servers: str | None = None
    postgres_dsn: str | None = None
    namespace: str | None = None
    kafka: Mapping[str, str] = field(default_factory=dict)  # librdkafka properties, such as security.protocol

    @staticmethod
    def from_dict(d: Mapping[str, Any], *, strict: bool = False) -> ClientConfigProfile:
        """From a profile's table; `strict` refuses keys it does not know."""
        for key in d:
            if key in _TEMPORAL_KEYS:
                raise ValueError(f"profile key {key!r} is Temporal's; Kadence's profile takes {_TEMPORAL_KEYS[key]}")
            if strict and key not in _KEYS:
                raise ValueError(f"profile key {key!r} is not one of {sorted(_KEYS)}")
        for key in ("bootstrap_servers", "postgres_dsn", "namespace"):
            if key in d and not isinstance(d[key], str):
                raise ValueError(f"profile key {key!r} is {d[key]!r}: give a string")
        kafka = d.get("kafka") or {}
        if not isinstance(kafka, Mapping):
            raise ValueError(f"profile key 'kafka' is {kafka!r}: give a table of librdkafka properties")
        return ClientConfigProfile(
            bootstrap_servers=d.get("bootstrap_servers"), postgres_dsn=d.get("postgres_dsn"), namespace=d.get("namespace"),
            kafka=_flatten(kafka),
        )

    def to_dict(self) -> dict[str, Any]:
        """The profile's table, its unset keys left out."""
        d: dict[str, Any] = {key: value for key, value in (
            ("bootstrap_servers", self.bootstrap_servers), ("postgres_dsn", self.postgres_dsn), ("namespace", self.namespace),
        ) if value is not None}
        if self.kafka:
            d["kafka"] = dict(self.kafka)
        return d

    def to_client_connect_config(self) -> ClientConnectConfig:
        """The keyword arguments of `Client.connect` this profile sets."""
        config = ClientConnectConfig()
        if self.bootstrap_servers:
            config["bootstrap_servers"] = self.bootstrap_servers
        if self.postgres_dsn:
            config["postgres_dsn"] = self.postgres_dsn
        if self.namespace is not None:
            config["namespace"] = self.namespace
        if self.kafka:
            config["kafka_config"] = dict(self.kafka)
        return config

    @staticmethod
    def load(
        profile: str | None = None, *, config_source: DataSource | None = None, disable_file: bool = False,
        disable_env: bool = False, config_file_strict: bool = False, override_env_vars: Mapping[str, str] | None = None,
    ) -> ClientConfigProfile:
        """One profile (`profile`, else KADENCE_PROFILE, else "default") of `config_source` (else
        the file KADENCE_CONFIG_FILE names, else the default file if there is one), with the
        environment's KADENCE_* settings over it (unless `disable_env`). A profile named that the
        file lacks is refused, the default one aside."""
        env = _environment(override_env_vars) if not disable_env else {}
        name = profile or env.get("KADENCE_PROFILE") or DEFAULT_PROFILE
        loaded = ClientConfigProfile()
        if config_source is not None or not disable_file:
            profiles = _load_profiles(config_source, override_env_vars, config_file_strict)
            if name in profiles:
                loaded = profiles[name]
            elif name != DEFAULT_PROFILE:
                raise ValueError(f"profile {name!r} is not in the config file (it has {sorted(profiles) or 'none'})")
        if disable_env:
            return loaded
        return ClientConfigProfile(
            bootstrap_servers=env.get("KADENCE_BOOTSTRAP_SERVERS") or loaded.bootstrap_servers,
            postgres_dsn=env.get("KADENCE_POSTGRES_DSN") or loaded.postgres_dsn,
            namespace=loaded.namespace,
            kafka={**loaded.kafka, **kafka_properties(env)},
        )


@dataclass
class ClientConfig:
    """Every profile of a config file."""

    profiles: Mapping[str, ClientConfigProfile]

    def to_dict(self) -> dict[str, dict[str, Any]]:
        return {name: profile.to_dict() for name, profile in self.profiles.items()}

    @staticmethod
    def from_dict(d: Mapping[str, Mapping[str, Any]], *, strict: bool = False) -> ClientConfig:
        return ClientConfig(profiles={name: ClientConfigProfile.from_dict(profile, strict=strict) for name, profile in d.items()})

    @staticmethod
    def load(
        *, config_source: DataSource | None = None, disable_file: bool = False, config_file_strict: bool = False,
        override_env_vars: Mapping[str, str] | None = None,
    ) -> ClientConfig:
        """Every profile of `config_source` (else of the file KADENCE_CONFIG_FILE names, else of the
        default file if there is one), as the file says: the environment overrides nothing here
        (ClientConfigProfile.load applies it)."""
        if config_source is None and disable_file:
            return ClientConfig(profiles={})
        return ClientConfig(profiles=_load_profiles(config_source, override_env_vars, config_file_strict))

    @staticmethod
    def load_client_connect_config(
        profile: str | None = None, *, config_file: str | None = None, disable_file: bool = False, disable_env: bool = False,
        config_file_strict: bool = False, override_env_vars: Mapping[str, str] | None = None,
    ) -> ClientConnectConfig:
        """`Client.connect`'s keyword arguments from a profile and the environment:
        `await Client.connect(**ClientConfig.load_client_connect_config())`."""
        source = Path(config_file) if config_file and not disable_file else None
        return ClientConfigProfile.load(
            profile, config_source=source, disable_file=disable_file, disable_env=disable_env,
            config_file_strict=config_file_strict, override_env_vars=override_env_vars,
        ).to_client_connect_config()


def default_config_file(env: Mapping[str, str]) -> Path:
    """Where the profiles are when KADENCE_CONFIG_FILE does not say: the user's config dir."""
    config_home = env.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(config_home) / "kadence" / "kadence.toml"


def _environment(override_env_vars: Mapping[str, str] | None) -> Mapping[str, str]:
    env = os.environ if override_env_vars is None else override_env_vars
    return {key: value for key, value in env.items() if value}


def _load_profiles(
    source: DataSource | None, override_env_vars: Mapping[str, str] | None, strict: bool,
) -> Mapping[str, ClientConfigProfile]:
    """The profiles of `source`, else of KADENCE_CONFIG_FILE's file (which must exist), else of the
    default file (none if it does not exist)."""
    if source is None:
        env = _environment(override_env_vars)
        named = env.get("KADENCE_CONFIG_FILE")
        source = Path(named) if named else default_config_file(env)
        if not named and not source.exists():
            return {}
    if isinstance(source, Path):
        try:
            text = source.read_text()
        except OSError as exc:
            raise ValueError(f"config file {source}: cannot read it: {exc}") from exc
    elif isinstance(source, bytes):
        text = source.decode()
    else:
        text = source
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        where = f"config file {source}" if isinstance(source, Path) else "config"
        raise ValueError(f"{where} is not TOML: {exc}") from exc
    if strict and set(document) - {"profile"}:
        raise ValueError(f"config has tables other than [profile.<name>]: {sorted(set(document) - {'profile'})}")
    profiles = document.get("profile", {})
    if not isinstance(profiles, Mapping):
        raise ValueError("config's `profile` must be tables: [profile.<name>]")
    return ClientConfig.from_dict(profiles, strict=strict).profiles


def _flatten(table: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """librdkafka properties from a TOML table: `security.protocol = "SSL"` unquoted is a nested
    table there; values as librdkafka reads them (true, 5000)."""
    flat: dict[str, str] = {}
    for key, value in table.items():
        if isinstance(value, Mapping):
            flat.update(_flatten(value, f"{prefix}{key}."))
        elif isinstance(value, bool):
            flat[prefix + key] = "true" if value else "false"
        elif isinstance(value, str | int | float):
            flat[prefix + key] = str(value)
        else:
            raise ValueError(f"kafka property {prefix + key!r} is {value!r}: give a string, number or boolean")
    return flat

