"""metatrain's built-in task families."""
