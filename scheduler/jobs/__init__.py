"""What a job is, and what it costs to run: the job.yaml schema and loader, YOLOv9 command lines and
outputs, inference shards, and the YOLOv9 time and memory model. Pure: no I/O, no store, no clock.
"""
