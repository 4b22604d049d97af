"""kadence.envconfig as temporalio.envconfig: profiles from a TOML file, the environment over them,
and a client connected with one."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from kadence.client import Client
from kadence.dev.local_stack import LocalStack
from kadence.envconfig import ClientConfig, ClientConfigProfile
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
    with pytest.raises(ValueError, match="'address' is Temporal's; Kadence's profile takes bootstrap_servers"):
        ClientConfigProfile.load(config_source='[profile.default]\naddress = "localhost:7233"\n', override_env_vars={})
    with pytest.raises(ValueError, match="'bootstrap_server' is not one of"):
        ClientConfigProfile.load(config_source='[profile.default]\nbootstrap_server = "k:1"\n', config_file_strict=True,
                                 override_env_vars={})
    with pytest.raises(ValueError, match="give a string"):
        ClientConfigProfile.load(config_source="[profile.default]\nbootstrap_servers = 9092\n", override_env_vars={})


async def test_a_client_connected_with_a_profile_runs_a_workflow(stack: LocalStack, task_queue: str, tmp_path: Path) -> None:
    path = tmp_path / "kadence.toml"
    path.write_text(f'[profile.local]\nbootstrap_servers = "{stack.bootstrap_servers}"\npostgres_dsn = "{stack.postgres_dsn}"\n'
                    '[profile.local.kafka]\nclient.id = "from-a-profile"\n')
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
