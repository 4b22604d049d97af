"""Optional integrations (as temporalio.contrib): each needs its extra installed."""
