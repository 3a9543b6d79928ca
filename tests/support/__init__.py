"""Helpers shared by the test tiers: real servers, never mocks."""
