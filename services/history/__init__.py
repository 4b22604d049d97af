"""History service: the only writer of kadence.history (docs/architecture.md, "The history service")."""
