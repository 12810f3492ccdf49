"""Test helpers shipped with bunko: the store conformance suite every backend must pass."""
