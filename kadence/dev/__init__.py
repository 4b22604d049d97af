"""The dev stack: `kadence dev`, the tests and the benchmarks run every service against a local
broker (Apache Kafka in KRaft mode, or Tansu) and an embedded PostgreSQL. Not part of the SDK:
`import kadence` never imports it."""
