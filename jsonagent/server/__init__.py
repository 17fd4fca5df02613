"""`jsonagent serve`: the agent over HTTP. Needs the `serve` extra (FastAPI, uvicorn,
sse-starlette, a2a-sdk); nothing here is imported by `import jsonagent`."""
