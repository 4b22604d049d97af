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

A temporalio profile is read too, so one file serves both during a migration: `namespace` and
the `[profile.<name>.tls]` table map (the TLS of the Kafka connection, below); `address`,
`api_key` and `grpc_meta` name a Temporal frontend and its credentials, which Kadence has no use
for: they are ignored with a warning, and a profile that gives Temporal's address and no Kafka
brokers (nor KADENCE_BOOTSTRAP_SERVERS) is refused when a client is configured from it. Of
temporalio's variables, TEMPORAL_CONFIG_FILE and TEMPORAL_PROFILE choose the file and profile
when KADENCE_CONFIG_FILE and KADENCE_PROFILE do not, and TEMPORAL_NAMESPACE, TEMPORAL_TLS* (and
TEMPORAL_ADDRESS, TEMPORAL_API_KEY, TEMPORAL_GRPC_META_*) are read over the profile as temporalio
reads them (docs/workflows.md, "Client settings from a profile").
"""

from __future__ import annotations

import dataclasses
import os
import sys
import tomllib
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

from kadence.protocol.settings import kafka_properties

DataSource = Path | str | bytes  # a file's path, or its contents (str or bytes)

DEFAULT_PROFILE = "default"
_KEYS = {"bootstrap_servers", "postgres_dsn", "namespace", "kafka"}
# temporalio's keys beside them: `tls` maps onto the Kafka connection's TLS; the rest are ignored
# (to_client_connect_config says so), `codec` silently, as temporalio's Python SDK ignores it too.
_TEMPORAL_KEYS = {"address", "api_key", "tls", "grpc_meta", "codec"}
# The TOML's [profile.<name>.tls] keys, and the {"path": ...} / {"data": ...} tables of temporalio's to_dict().
_TLS_SOURCES = {"client_cert": "client_cert", "client_key": "client_private_key", "server_ca_cert": "server_root_ca_cert"}
_TLS_KEYS = {"disabled", "server_name", "disable_host_verification", *_TLS_SOURCES,
             *(f"{key}_{kind}" for key in _TLS_SOURCES for kind in ("path", "data"))}
# librdkafka's properties for each source: a file (.location) or PEM text (.pem).
_SSL_PROPERTIES = {"server_root_ca_cert": "ssl.ca", "client_cert": "ssl.certificate", "client_private_key": "ssl.key"}


class TemporalProfileWarning(UserWarning):
    """A temporalio profile setting Kadence has no use for, which it ignores."""


def _warn(message: str) -> None:
    """Warn at the caller's line outside this module, which Python's default filter then shows once."""
    level, frame = 1, sys._getframe(0)
    while frame.f_back is not None and frame.f_globals.get("__name__") == __name__:
        frame, level = frame.f_back, level + 1
    warnings.warn(message, TemporalProfileWarning, stacklevel=level)


class ClientConnectConfig(TypedDict, total=False):
    """Keyword arguments of `Client.connect` that a profile sets."""

    bootstrap_servers: str
    postgres_dsn: str
    namespace: str
    kafka_config: Mapping[str, str]


@dataclass(frozen=True)
class ClientConfigTLS:
    """temporalio's TLS settings, as the TLS of the connection to the Kafka brokers."""

    disabled: bool | None = None  # True: no TLS; False or None: TLS, as the table's presence asks
    server_name: str | None = None  # SNI and the name verified: librdkafka has no override, so ignored
    server_root_ca_cert: DataSource | None = None
    client_cert: DataSource | None = None
    client_private_key: DataSource | None = None
    disable_host_verification: bool = False

    @staticmethod
    def from_dict(d: Mapping[str, Any] | None, *, strict: bool = False) -> ClientConfigTLS | None:
        """From a profile's `tls` table: the TOML's keys (`client_cert_path`, `client_cert_data` ...)
        or temporalio's `to_dict()` shape (`client_cert = {path = ...}`)."""
        if not d:
            return None
        if not isinstance(d, Mapping):
            raise ValueError(f"profile key 'tls' is {d!r}: give a table")
        if strict and set(d) - _TLS_KEYS:
            raise ValueError(f"tls keys {sorted(set(d) - _TLS_KEYS)} are not among {sorted(_TLS_KEYS)}")
        for key in ("disabled", "disable_host_verification"):
            if d.get(key) is not None and not isinstance(d[key], bool):
                raise ValueError(f"tls key {key!r} is {d[key]!r}: give true or false")
        if d.get("server_name") is not None and not isinstance(d["server_name"], str):
            raise ValueError(f"tls key 'server_name' is {d['server_name']!r}: give a string")
        return ClientConfigTLS(
            disabled=d.get("disabled"), server_name=d.get("server_name"),
            disable_host_verification=bool(d.get("disable_host_verification", False)),
            **{attribute: _source(d, key) for key, attribute in _TLS_SOURCES.items()},
        )

    def to_dict(self) -> dict[str, Any]:
        """temporalio's shape: `{"client_cert": {"path": ...}}` for a file, `{"data": ...}` for PEM text."""
        d: dict[str, Any] = {}
        if self.disabled is not None:
            d["disabled"] = self.disabled
        if self.server_name is not None:
            d["server_name"] = self.server_name
        if self.disable_host_verification:
            d["disable_host_verification"] = True
        for key, attribute in _TLS_SOURCES.items():
            source = getattr(self, attribute)
            if isinstance(source, Path):
                d[key] = {"path": str(source)}
            elif source is not None:
                d[key] = {"data": source.decode() if isinstance(source, bytes) else source}
        return d

    def to_kafka_properties(self) -> dict[str, str]:
        """librdkafka's properties for this TLS: security.protocol SSL and the ssl.* of each source."""
        if self.disabled:
            return {}
        if (self.client_cert is None) != (self.client_private_key is None):
            raise ValueError("tls: give the client certificate and its key together (client_cert_* and client_key_*)")
        properties = {"security.protocol": "SSL"}
        for attribute, prefix in _SSL_PROPERTIES.items():
            source: DataSource | None = getattr(self, attribute)
            if isinstance(source, Path):
                properties[f"{prefix}.location"] = str(source)
            elif source:
                properties[f"{prefix}.pem"] = source.decode() if isinstance(source, bytes) else source
        if self.disable_host_verification:
            properties["ssl.endpoint.identification.algorithm"] = "none"
        return properties


@dataclass(frozen=True)
class ClientConfigProfile:
    """One profile, as a file and the environment set it."""

    bootstrap_servers: str | None = None
    postgres_dsn: str | None = None
    namespace: str | None = None
    kafka: Mapping[str, str] = field(default_factory=dict)  # librdkafka properties, such as security.protocol
    # temporalio's fields, read so that one file serves both: to_client_connect_config maps `tls`
    # onto the Kafka connection and ignores the rest, which are a Temporal frontend's.
    address: str | None = None
    api_key: str | None = None
    tls: ClientConfigTLS | None = None
    grpc_meta: Mapping[str, str] = field(default_factory=dict)

    @staticmethod
    def from_dict(d: Mapping[str, Any], *, strict: bool = False) -> ClientConfigProfile:
        """From a profile's table; `strict` refuses keys it does not know."""
        if strict and set(d) - _KEYS - _TEMPORAL_KEYS:
            raise ValueError(f"profile keys {sorted(set(d) - _KEYS - _TEMPORAL_KEYS)} are not among {sorted(_KEYS | _TEMPORAL_KEYS)}")
        for key in ("bootstrap_servers", "postgres_dsn", "namespace", "address", "api_key"):
            if key in d and not isinstance(d[key], str):
                raise ValueError(f"profile key {key!r} is {d[key]!r}: give a string")
        kafka = d.get("kafka") or {}
        if not isinstance(kafka, Mapping):
            raise ValueError(f"profile key 'kafka' is {kafka!r}: give a table of librdkafka properties")
        grpc_meta = d.get("grpc_meta") or {}
        if not isinstance(grpc_meta, Mapping):
            raise ValueError(f"profile key 'grpc_meta' is {grpc_meta!r}: give a table")
        return ClientConfigProfile(
            bootstrap_servers=d.get("bootstrap_servers"), postgres_dsn=d.get("postgres_dsn"), namespace=d.get("namespace"),
            kafka=_flatten(kafka), address=d.get("address"), api_key=d.get("api_key"),
            tls=ClientConfigTLS.from_dict(d.get("tls"), strict=strict), grpc_meta={str(k): str(v) for k, v in grpc_meta.items()},
        )

    def to_dict(self) -> dict[str, Any]:
        """The profile's table, its unset keys left out."""
        d: dict[str, Any] = {key: value for key, value in (
            ("bootstrap_servers", self.bootstrap_servers), ("postgres_dsn", self.postgres_dsn), ("namespace", self.namespace),
            ("address", self.address), ("api_key", self.api_key),
        ) if value is not None}
        if self.kafka:
            d["kafka"] = dict(self.kafka)
        if self.tls and (tls := self.tls.to_dict()):
            d["tls"] = tls
        if self.grpc_meta:
            d["grpc_meta"] = dict(self.grpc_meta)
        return d

    def to_client_connect_config(self) -> ClientConnectConfig:
        """The keyword arguments of `Client.connect` this profile sets. `tls` becomes librdkafka's
        SSL properties, under the `kafka` table's (which win); temporalio's other keys are ignored
        with a warning, and refused when the profile gives Temporal's address and no Kafka brokers."""
        self._check_temporal_keys()
        config = ClientConnectConfig()
        if self.bootstrap_servers:
            config["bootstrap_servers"] = self.bootstrap_servers
        if self.postgres_dsn:
            config["postgres_dsn"] = self.postgres_dsn
        if self.namespace is not None:
            config["namespace"] = self.namespace
        kafka = {**(self.tls.to_kafka_properties() if self.tls else {}), **self.kafka}
        if kafka:
            config["kafka_config"] = kafka
        return config

    def _check_temporal_keys(self) -> None:
        if self.address is not None:
            # Client.connect falls back on KADENCE_BOOTSTRAP_SERVERS itself, so it counts here.
            if self.bootstrap_servers:
                brokers = f"bootstrap_servers ({self.bootstrap_servers})"
            elif os.environ.get("KADENCE_BOOTSTRAP_SERVERS"):
                brokers = "KADENCE_BOOTSTRAP_SERVERS (add bootstrap_servers to the profile to keep them in the file)"
            else:
                raise ValueError(
                    f"the profile gives Temporal's address {self.address!r} (or TEMPORAL_ADDRESS does) and no Kafka brokers: "
                    "Kadence connects to Kafka, not to a Temporal frontend; add bootstrap_servers = \"<host>:9092\" and "
                    "postgres_dsn to the profile beside address, or set KADENCE_BOOTSTRAP_SERVERS and KADENCE_POSTGRES_DSN"
                )
            _warn(f"Temporal's address {self.address!r} is ignored (Kadence has no frontend to connect to): "
                  f"Kadence connects to the Kafka brokers of {brokers}")
        if self.api_key is not None:
            _warn("Temporal's api_key is ignored and sent nowhere (no Kafka broker takes a Temporal key): a broker that "
                  "needs credentials takes them in [profile.<name>.kafka]: security.protocol = \"SASL_SSL\", "
                  "sasl.mechanism = \"PLAIN\" (or SCRAM-SHA-256, SCRAM-SHA-512), sasl.username, sasl.password")
        if self.grpc_meta:
            _warn(f"Temporal's grpc_meta {sorted(self.grpc_meta)} is ignored: Kadence has no RPC to send gRPC headers on")
        if self.tls and self.tls.server_name is not None and not self.tls.disabled:
            _warn(f"tls.server_name {self.tls.server_name!r} is ignored: librdkafka has no SNI override, it sends and "
                  "verifies each broker's own host name (disable_host_verification = true skips the check)")

    @staticmethod
    def load(
        profile: str | None = None, *, config_source: DataSource | None = None, disable_file: bool = False,
        disable_env: bool = False, config_file_strict: bool = False, override_env_vars: Mapping[str, str] | None = None,
    ) -> ClientConfigProfile:
        """One profile (`profile`, else KADENCE_PROFILE, else TEMPORAL_PROFILE, else "default") of
        `config_source` (else the file `_load_profiles` finds), with the environment's settings over
        it (unless `disable_env`): KADENCE_* and temporalio's TEMPORAL_NAMESPACE, TEMPORAL_TLS*,
        TEMPORAL_ADDRESS, TEMPORAL_API_KEY, TEMPORAL_GRPC_META_*. A profile named that the file lacks
        is refused, the default one aside."""
        env = _environment(override_env_vars) if not disable_env else {}
        name = profile or env.get("KADENCE_PROFILE") or env.get("TEMPORAL_PROFILE") or DEFAULT_PROFILE
        loaded = ClientConfigProfile()
        if config_source is not None or not disable_file:
            profiles = _load_profiles(config_source, override_env_vars, config_file_strict)
            if name in profiles:
                loaded = profiles[name]
            elif name != DEFAULT_PROFILE:
                named_by = "" if profile else " (KADENCE_PROFILE)" if env.get("KADENCE_PROFILE") else " (TEMPORAL_PROFILE)"
                raise ValueError(f"profile {name!r}{named_by} is not in the config file (it has {sorted(profiles) or 'none'})")
        if disable_env:
            return loaded
        return ClientConfigProfile(
            bootstrap_servers=env.get("KADENCE_BOOTSTRAP_SERVERS") or loaded.bootstrap_servers,
            postgres_dsn=env.get("KADENCE_POSTGRES_DSN") or loaded.postgres_dsn,
            namespace=env.get("TEMPORAL_NAMESPACE") or loaded.namespace,
            kafka={**loaded.kafka, **kafka_properties(env)},
            address=env.get("TEMPORAL_ADDRESS") or loaded.address,
            api_key=env.get("TEMPORAL_API_KEY") or loaded.api_key,
            tls=_tls_from_env(loaded.tls, env),
            grpc_meta={**loaded.grpc_meta, **{
                key.removeprefix("TEMPORAL_GRPC_META_").lower().replace("_", "-"): value
                for key, value in env.items() if key.startswith("TEMPORAL_GRPC_META_")
            }},
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
        """Every profile of `config_source` (else of the file `_load_profiles` finds), as the file
        says: the environment overrides nothing here (ClientConfigProfile.load applies it)."""
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
    default file if it exists, else of TEMPORAL_CONFIG_FILE's (which must exist), else none.
    Kadence's own file comes first, so a Temporal CLI's variable does not hide it; temporalio's
    default file is not read (a profile there names a Temporal frontend and nothing Kadence's)."""
    if source is None:
        env = _environment(override_env_vars)
        named = env.get("KADENCE_CONFIG_FILE")
        source = Path(named) if named else default_config_file(env)
        if not named and not source.exists():
            if not env.get("TEMPORAL_CONFIG_FILE"):
                return {}
            source = Path(env["TEMPORAL_CONFIG_FILE"])
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


def _source(tls: Mapping[str, Any], key: str) -> DataSource | None:
    """One TLS source of a `tls` table: `<key>_path` or `<key>_data` (the TOML's), or `<key>` as
    `{path = ...}` or `{data = ...}` (temporalio's to_dict()); an empty value is none."""
    table = tls.get(key)
    path, data = tls.get(f"{key}_path"), tls.get(f"{key}_data")
    if isinstance(table, Mapping):
        path, data = path or table.get("path"), data or table.get("data")
    if path and data:
        raise ValueError(f"tls: give {key}_path or {key}_data, not both")
    for value, kind in ((path, "path"), (data, "data")):
        if value is not None and not isinstance(value, str):
            raise ValueError(f"tls key {key}_{kind} is {value!r}: give a string")
    return Path(path) if path else data or None


def _tls_from_env(tls: ClientConfigTLS | None, env: Mapping[str, str]) -> ClientConfigTLS | None:
    """temporalio's TEMPORAL_TLS* variables over a profile's TLS, as temporalio applies them."""
    if not any(key == "TEMPORAL_TLS" or key.startswith("TEMPORAL_TLS_") for key in env):
        return tls
    tls = tls or ClientConfigTLS()
    changes: dict[str, Any] = {}
    if (enabled := _boolean(env, "TEMPORAL_TLS")) is not None:
        changes["disabled"] = not enabled
    if "TEMPORAL_TLS_SERVER_NAME" in env:
        changes["server_name"] = env["TEMPORAL_TLS_SERVER_NAME"]
    if (skip := _boolean(env, "TEMPORAL_TLS_DISABLE_HOST_VERIFICATION")) is not None:
        changes["disable_host_verification"] = skip
    for key, attribute in _TLS_SOURCES.items():
        path, data = env.get(f"TEMPORAL_TLS_{key.upper()}_PATH"), env.get(f"TEMPORAL_TLS_{key.upper()}_DATA")
        if path and data:
            raise ValueError(f"give TEMPORAL_TLS_{key.upper()}_PATH or TEMPORAL_TLS_{key.upper()}_DATA, not both")
        if path or data:
            changes[attribute] = Path(path) if path else data
    return dataclasses.replace(tls, **changes)


def _boolean(env: Mapping[str, str], key: str) -> bool | None:
    """A variable as temporalio reads a boolean: true/1, false/0, else unset."""
    return {"true": True, "1": True, "false": False, "0": False}.get(env.get(key, "").lower())


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

