"""The ``container`` engine: each attempt is one container of Docker or Podman."""
