"""What every Kadence process shares: record codec, Kafka plumbing, topic names, the log-fencing rule."""
