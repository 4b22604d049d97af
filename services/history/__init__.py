"""History service: the only writer of kadence.history (DESIGN.md, 'The loop')."""
