"""Rollouts (filled in below)."""
