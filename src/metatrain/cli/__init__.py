"""The ``metatrain`` command line."""
