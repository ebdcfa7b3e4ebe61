"""Fixtures shared by the integration tests: one moto server for the whole session."""

from tests.integration.services import moto  # noqa: F401
