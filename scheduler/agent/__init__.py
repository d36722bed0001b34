"""What runs on the cloud machine: the long-lived agent that runs every YOLOv9 job the daemon puts on
its machine and reports on them (runner), what the machine says about itself (machine), the user-data
that starts it (bootstrap), and the machine-scoped agent tokens.
"""
