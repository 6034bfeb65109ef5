"""The gateway's backend: :class:`~dialscore_server.directory.ModelDirectory` (shared with the
batch runner, which must not import the gateway), re-exported here."""

from dialscore_server.directory import READINESS_TIMEOUT_S, ModelDirectory  # noqa: F401
