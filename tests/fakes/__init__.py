"""Test doubles that speak real protocols on loopback (no network beyond 127.0.0.1)."""
