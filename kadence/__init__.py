"""Kadence: a durable workflow engine in the model of Temporal, built on Kafka.

The SDK mirrors temporalio: `kadence.workflow`, `kadence.activity`, `kadence.client.Client`,
`kadence.worker.Worker`, `kadence.common.RetryPolicy`, `kadence.exceptions`.
"""
