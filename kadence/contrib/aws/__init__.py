"""Integrations with AWS (as temporalio.contrib.aws): `s3driver`, external payload storage in S3."""
