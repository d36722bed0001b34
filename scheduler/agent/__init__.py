"""What runs on the cloud machine: the agent that runs a YOLOv9 job and reports on it, the user-data
that starts it (bootstrap), and the short-lived agent tokens.
"""
