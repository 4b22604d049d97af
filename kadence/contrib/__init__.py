"""Optional integrations (as temporalio.contrib): each needs its extra installed, but
workflow_streams, which is built on the SDK alone."""
