"""Timer service: stores timer effects from kadence.history in Postgres and fires them as commands."""
