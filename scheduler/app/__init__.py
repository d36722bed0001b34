"""The entry points: the CLI, the HTTP API and its client, the daemon, and wiring (the composition
root: the one module that builds concrete parts from Settings).
"""
