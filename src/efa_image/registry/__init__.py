"""Container registries: repository references, credentials, and the registry HTTP API."""
