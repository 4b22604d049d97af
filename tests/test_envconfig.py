"""kadence.envconfig as temporalio.envconfig: profiles from a TOML file, the environment over them,
and a client connected with one."""

from __future__ import annotations

import datetime
import re
import uuid
import warnings
from pathlib import Path

import pytest
from confluent_kafka import KafkaException
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from kadence.client import Client
from kadence.dev.local_stack import LocalStack
from kadence.envconfig import ClientConfig, ClientConfigProfile, ClientConfigTLS, TemporalProfileWarning
from kadence.visibility import WorkflowExecutionStatus
from kadence.worker import Worker
from tests.workflows import EchoWorkflow, echo

CONFIG = """
[profile.default]
bootstrap_servers = "127.0.0.1:9092"
postgres_dsn = "postgresql://kadence@localhost/kadence"

[profile.prod]
bootstrap_servers = "kafka-1:9093,kafka-2:9093"
postgres_dsn = "postgresql://kadence@db/kadence"
namespace = "default"

[profile.prod.kafka]
security.protocol = "SASL_SSL"
"sasl.mechanism" = "SCRAM-SHA-512"
"socket.keepalive.enable" = true
"""


def test_a_profile_gives_client_connects_arguments(tmp_path: Path) -> None:
    path = tmp_path / "kadence.toml"
    path.write_text(CONFIG)
    assert ClientConfig.load_client_connect_config("prod", config_file=str(path), override_env_vars={}) == {
        "bootstrap_servers": "kafka-1:9093,kafka-2:9093", "postgres_dsn": "postgresql://kadence@db/kadence", "namespace": "default",
        "kafka_config": {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "socket.keepalive.enable": "true"},
    }
    # KADENCE_CONFIG_FILE and KADENCE_PROFILE choose them, and the KADENCE_* settings win over the file's.
    env = {
        "KADENCE_CONFIG_FILE": str(path), "KADENCE_PROFILE": "prod", "KADENCE_BOOTSTRAP_SERVERS": "kafka-9:9093",
        "KADENCE_KAFKA_SASL_USERNAME": "svc", "KADENCE_KAFKA_SECURITY_PROTOCOL": "SSL", "KADENCE_POSTGRES_DSN": "",
    }
    config = ClientConfig.load_client_connect_config(override_env_vars=env)
    assert config["bootstrap_servers"] == "kafka-9:9093"
    assert config["postgres_dsn"] == "postgresql://kadence@db/kadence"  # an empty variable is unset
    assert config["kafka_config"] == {
        "security.protocol": "SSL", "sasl.mechanism": "SCRAM-SHA-512", "socket.keepalive.enable": "true", "sasl.username": "svc",
    }
    assert ClientConfig.load_client_connect_config(override_env_vars=env, disable_env=True) == {
        "bootstrap_servers": "127.0.0.1:9092", "postgres_dsn": "postgresql://kadence@localhost/kadence",
    }
    # Every profile, as the file says, and back.
    loaded = ClientConfig.load(config_source=CONFIG)
    assert sorted(loaded.profiles) == ["default", "prod"]
    assert ClientConfig.from_dict(loaded.to_dict()) == loaded


def test_the_default_file_and_no_file(tmp_path: Path) -> None:
    home = tmp_path / "config"
    assert ClientConfig.load_client_connect_config(override_env_vars={"XDG_CONFIG_HOME": str(home)}) == {}
    (home / "kadence").mkdir(parents=True)
    (home / "kadence" / "kadence.toml").write_text(CONFIG)
    assert ClientConfigProfile.load(override_env_vars={"XDG_CONFIG_HOME": str(home)}).bootstrap_servers == "127.0.0.1:9092"
    assert ClientConfigProfile.load(override_env_vars={"XDG_CONFIG_HOME": str(home), "KADENCE_BOOTSTRAP_SERVERS": "k:1"},
                                    disable_file=True) == ClientConfigProfile(bootstrap_servers="k:1")


def test_what_cannot_be_loaded_is_refused_with_the_reason(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"profile 'staging' is not in the config file \(it has \['default', 'prod'\]\)"):
        ClientConfigProfile.load("staging", config_source=CONFIG, override_env_vars={})
    with pytest.raises(ValueError, match="cannot read it"):
        ClientConfigProfile.load(override_env_vars={"KADENCE_CONFIG_FILE": str(tmp_path / "missing.toml")})
    with pytest.raises(ValueError, match="is not TOML"):
        ClientConfigProfile.load(config_source="[profile.default\n", override_env_vars={})
    with pytest.raises(ValueError, match=r"profile keys \['bootstrap_server'\] are not among"):
        ClientConfigProfile.load(config_source='[profile.default]\nbootstrap_server = "k:1"\n', config_file_strict=True,
                                 override_env_vars={})
    with pytest.raises(ValueError, match="give a string"):
        ClientConfigProfile.load(config_source="[profile.default]\nbootstrap_servers = 9092\n", override_env_vars={})


# One file for both during a migration: temporalio reads address, api_key, tls and grpc_meta;
# Kadence reads its own keys, maps tls onto the Kafka connection and ignores the rest.
MIGRATING = """
[profile.default]
address = "localhost:7233"
namespace = "default"
[profile.default.grpc_meta]
team = "payments"

[profile.cloud]
address = "payments.a1b2c.tmprl.cloud:7233"
namespace = "default"
api_key = "a-temporal-cloud-key"
bootstrap_servers = "127.0.0.1:1"
[profile.cloud.tls]
client_cert_path = "{cert}"
client_key_path = "{key}"
server_ca_cert_path = "{ca}"
server_name = "payments.a1b2c.tmprl.cloud"

[profile.cloud-sasl]
bootstrap_servers = "127.0.0.1:1"
[profile.cloud-sasl.tls]
server_ca_cert_data = '''{ca_pem}'''
[profile.cloud-sasl.kafka]
security.protocol = "SASL_SSL"
sasl.mechanism = "SCRAM-SHA-512"
"""


def certificates(directory: Path) -> dict[str, str]:
    """A self-signed certificate and its key, as files and as PEM, for librdkafka to load."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kadence-client")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key()).serial_number(1)
            .not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1)).sign(key, hashes.SHA256()))
    cert_pem = cert.public_bytes(serialization.Encoding.PEM).decode()
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()).decode()
    (directory / "client.pem").write_text(cert_pem)
    (directory / "client.key").write_text(key_pem)
    return {"cert": str(directory / "client.pem"), "key": str(directory / "client.key"), "ca": str(directory / "client.pem"),
            "cert_pem": cert_pem, "key_pem": key_pem, "ca_pem": cert_pem}


def messages(caught: list[warnings.WarningMessage]) -> str:
    return "\n".join(str(w.message) for w in caught if issubclass(w.category, TemporalProfileWarning))


async def test_a_temporal_profiles_tls_is_the_kafka_connections(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KADENCE_BOOTSTRAP_SERVERS", raising=False)
    made = certificates(tmp_path)
    path = tmp_path / "temporal.toml"
    path.write_text(MIGRATING.format(**made))
    with pytest.warns(TemporalProfileWarning) as caught:
        config = ClientConfig.load_client_connect_config("cloud", config_file=str(path), override_env_vars={})
    assert config == {"bootstrap_servers": "127.0.0.1:1", "namespace": "default", "kafka_config": {
        "security.protocol": "SSL", "ssl.certificate.location": made["cert"], "ssl.key.location": made["key"],
        "ssl.ca.location": made["ca"],
    }}
    said = messages(caught)
    assert "Temporal's address 'payments.a1b2c.tmprl.cloud:7233' is ignored" in said
    assert "api_key is ignored and sent nowhere" in said and "sasl.username" in said
    assert "tls.server_name 'payments.a1b2c.tmprl.cloud' is ignored" in said
    assert "a-temporal-cloud-key" not in said
    # librdkafka loads the certificate and key as the client makes its producer: the names are its own.
    client = await Client.connect(**config)
    assert client.settings.client_config["ssl.key.location"] == made["key"]
    await client.close()

    # PEM text in the file is librdkafka's *.pem, and the kafka table's properties win over tls's.
    config = ClientConfig.load_client_connect_config("cloud-sasl", config_file=str(path), override_env_vars={})
    assert config["kafka_config"] == {"security.protocol": "SASL_SSL", "ssl.ca.pem": made["ca_pem"], "sasl.mechanism": "SCRAM-SHA-512"}

    # A broken certificate fails as librdkafka reads it, so the test above proves it was read.
    broken = ClientConfigProfile(bootstrap_servers="127.0.0.1:1", tls=ClientConfigTLS(
        client_cert="-----BEGIN CERTIFICATE-----\nnot one\n-----END CERTIFICATE-----\n", client_private_key=made["key_pem"]))
    with pytest.raises(KafkaException, match="ssl.certificate.pem"):
        await Client.connect(**broken.to_client_connect_config())


def test_a_profile_that_is_only_temporals_is_refused_with_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KADENCE_BOOTSTRAP_SERVERS", raising=False)
    path = tmp_path / "temporal.toml"
    path.write_text(MIGRATING.format(cert="c", key="k", ca="a", ca_pem=""))
    profile = ClientConfigProfile.load(config_source=path, override_env_vars={})
    assert (profile.address, profile.namespace, dict(profile.grpc_meta)) == ("localhost:7233", "default", {"team": "payments"})
    with pytest.raises(ValueError, match=r"Temporal's address 'localhost:7233' .* and no Kafka brokers: .* add bootstrap_servers"):
        profile.to_client_connect_config()
    # The environment giving the brokers is enough: the address and the gRPC headers are ignored, said once each.
    monkeypatch.setenv("KADENCE_BOOTSTRAP_SERVERS", "127.0.0.1:9092")
    with pytest.warns(TemporalProfileWarning) as caught:
        assert profile.to_client_connect_config() == {"namespace": "default"}
    said = messages(caught)
    assert "Kafka brokers of KADENCE_BOOTSTRAP_SERVERS (add bootstrap_servers to the profile" in said
    assert "grpc_meta ['team'] is ignored" in said


def test_temporals_environment_variables(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KADENCE_BOOTSTRAP_SERVERS", raising=False)
    made = certificates(tmp_path)
    path = tmp_path / "temporal.toml"
    path.write_text(MIGRATING.format(**made))
    # TEMPORAL_CONFIG_FILE and TEMPORAL_PROFILE choose them when KADENCE_* do not; TLS as temporalio applies it.
    env = {"TEMPORAL_CONFIG_FILE": str(path), "TEMPORAL_PROFILE": "cloud-sasl", "XDG_CONFIG_HOME": str(tmp_path / "none"),
           "TEMPORAL_NAMESPACE": "default", "TEMPORAL_TLS_CLIENT_CERT_DATA": made["cert_pem"],
           "TEMPORAL_TLS_CLIENT_KEY_PATH": made["key"], "TEMPORAL_TLS_DISABLE_HOST_VERIFICATION": "true",
           "KADENCE_KAFKA_SASL_USERNAME": "svc"}
    assert ClientConfig.load_client_connect_config(override_env_vars=env) == {
        "bootstrap_servers": "127.0.0.1:1", "namespace": "default", "kafka_config": {
            "security.protocol": "SASL_SSL", "ssl.ca.pem": made["ca_pem"], "ssl.certificate.pem": made["cert_pem"],
            "ssl.key.location": made["key"], "ssl.endpoint.identification.algorithm": "none",
            "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "svc",
        },
    }
    # KADENCE_PROFILE wins over TEMPORAL_PROFILE; TEMPORAL_TLS=false turns the profile's TLS off.
    config = ClientConfig.load_client_connect_config(override_env_vars={**env, "KADENCE_PROFILE": "cloud-sasl", "TEMPORAL_PROFILE": "x",
                                                                        "TEMPORAL_TLS": "false"})
    assert config["kafka_config"] == {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "svc"}
    # TEMPORAL_TLS=true alone is TLS with the system's CAs; TEMPORAL_ADDRESS and TEMPORAL_API_KEY are Temporal's.
    profile = ClientConfigProfile.load(disable_file=True, override_env_vars={
        "TEMPORAL_TLS": "1", "TEMPORAL_ADDRESS": "temporal:7233", "TEMPORAL_API_KEY": "k", "KADENCE_BOOTSTRAP_SERVERS": "kafka:9093",
    })
    assert (profile.address, profile.api_key) == ("temporal:7233", "k")
    with pytest.warns(TemporalProfileWarning) as caught:
        assert profile.to_client_connect_config() == {"bootstrap_servers": "kafka:9093", "kafka_config": {"security.protocol": "SSL"}}
    assert "Temporal's address 'temporal:7233' is ignored" in messages(caught) and "api_key is ignored" in messages(caught)
    # Kadence's own file, in its place, comes before the one TEMPORAL_CONFIG_FILE names.
    (tmp_path / "home" / "kadence").mkdir(parents=True)
    (tmp_path / "home" / "kadence" / "kadence.toml").write_text(CONFIG)
    kadences = ClientConfig.load(override_env_vars={**env, "XDG_CONFIG_HOME": str(tmp_path / "home")})
    assert sorted(kadences.profiles) == ["default", "prod"]
    with pytest.raises(ValueError, match=r"profile 'cloud-sasl' \(TEMPORAL_PROFILE\) is not in the config file"):
        ClientConfigProfile.load(override_env_vars={**env, "XDG_CONFIG_HOME": str(tmp_path / "home")})


async def test_temporals_frontend_address_given_to_connect_is_taken_for_its_target_host(monkeypatch: pytest.MonkeyPatch) -> None:
    """temporalio's first argument is the frontend's address (`Client.connect("localhost:7233")` in its
    samples): on Temporal's port it is target_host, and the brokers are KADENCE_BOOTSTRAP_SERVERS'."""
    monkeypatch.delenv("KADENCE_BOOTSTRAP_SERVERS", raising=False)
    with pytest.raises(ValueError, match=r"names Temporal's frontend port 7233, .*: set KADENCE_BOOTSTRAP_SERVERS"):
        await Client.connect("localhost:7233")
    monkeypatch.setenv("KADENCE_BOOTSTRAP_SERVERS", "127.0.0.1:1")
    for given, brokers in (("localhost:7233", "127.0.0.1:1"), ("temporal-a:7233,temporal-b:7233", "127.0.0.1:1"),
                           ("127.0.0.1:2", "127.0.0.1:2")):
        client = await Client.connect(given)
        try:
            assert client.settings.bootstrap_servers == brokers, given
        finally:
            await client.close()


def test_what_temporals_tls_cannot_be_is_refused() -> None:
    disabled = ClientConfigProfile.load(config_source='[profile.default]\nbootstrap_servers = "k:1"\n[profile.default.tls]\n'
                                        'disabled = true\nserver_name = "ignored-when-off"\n', override_env_vars={})
    assert disabled.to_client_connect_config() == {"bootstrap_servers": "k:1"}
    with pytest.raises(ValueError, match="client certificate and its key together"):
        ClientConfigProfile(tls=ClientConfigTLS(client_cert=Path("c.pem"))).to_client_connect_config()
    with pytest.raises(ValueError, match="client_cert_path or client_cert_data, not both"):
        ClientConfigTLS.from_dict({"client_cert_path": "c.pem", "client_cert_data": "PEM"})
    with pytest.raises(ValueError, match=r"tls keys \['client_certificate'\]"):
        ClientConfigTLS.from_dict({"client_certificate": "c.pem"}, strict=True)
    # temporalio's keys are a profile's own in a strict read, and to_dict() is temporalio's shape, read back.
    loaded = ClientConfig.load(config_source=MIGRATING.format(cert="c.pem", key="k.pem", ca="ca.pem", ca_pem="PEM"),
                               config_file_strict=True)
    assert loaded.profiles["cloud"].to_dict()["tls"] == {
        "server_name": "payments.a1b2c.tmprl.cloud", "client_cert": {"path": "c.pem"}, "client_key": {"path": "k.pem"},
        "server_ca_cert": {"path": "ca.pem"},
    }
    assert ClientConfig.from_dict(loaded.to_dict()) == loaded


async def test_a_client_connected_with_a_profile_runs_a_workflow(stack: LocalStack, task_queue: str, tmp_path: Path) -> None:
    path = tmp_path / "kadence.toml"
    # Temporal's keys beside Kadence's, as a file that serves both during a migration.
    path.write_text(f'[profile.local]\naddress = "localhost:7233"\nbootstrap_servers = "{stack.bootstrap_servers}"\n'
                    f'postgres_dsn = "{stack.postgres_dsn}"\n[profile.local.tls]\ndisabled = true\n'
                    '[profile.local.kafka]\nclient.id = "from-a-profile"\n')
    with pytest.warns(TemporalProfileWarning, match=re.escape(f"Kafka brokers of bootstrap_servers ({stack.bootstrap_servers})")):
        config = ClientConfig.load_client_connect_config(
            "local", config_file=str(path), override_env_vars={"KADENCE_CONFIG_FILE": "/nowhere", "PATH": "/usr/bin"},
        )
    client = await Client.connect(**config)
    try:
        assert client.settings.bootstrap_servers == stack.bootstrap_servers
        assert client.settings.client_config["client.id"] == "from-a-profile"
        async with Worker(client, task_queue=task_queue, workflows=[EchoWorkflow], activities=[echo]):
            workflow_id = f"profile-{uuid.uuid4()}"
            assert await client.execute_workflow(EchoWorkflow.run, "hello", id=workflow_id, task_queue=task_queue) == "hello"
            assert (await client.get_workflow_handle(workflow_id).describe()).status == WorkflowExecutionStatus.COMPLETED
    finally:
        await client.close()
