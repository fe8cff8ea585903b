"""Machine set-up: Debian packages, the Docker engine, the virtualenv (and set-up workarounds)."""
