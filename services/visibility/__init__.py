"""Visibility projector: folds kadence.history into the Postgres read model behind describe, list and result."""
