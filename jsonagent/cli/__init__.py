"""The `jsonagent` command: thin layers over the library."""
