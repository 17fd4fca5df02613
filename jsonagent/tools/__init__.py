"""Tools: specs (the contract), `@tool` functions, the toolset of a run and the built-ins."""
